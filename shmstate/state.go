//go:build linux

package shmstate

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"omnishm/scope"
	"omnishm/segment"
)

// OrphanGrace is the age after which a lock file without its segment is an
// orphan (SPEC §6): the per-key path's own constant.
const OrphanGrace = segment.OrphanGrace

// Options select what Scan and Prune look at.
type Options struct {
	// Dir is the shared-memory directory; "" means scope.ShmDir.
	Dir string
	// UID is whose files are considered; 0 means the caller's real uid
	// (which is 0 for root anyway). Files of any other owner are ignored.
	UID int
	// Scopes restricts the view to these wakeup scopes (mapped through
	// scope.ForUID); nil means every scope found.
	Scopes []string
	// KeyPrefix restricts per-key segments and lock files to keys that start
	// with it ("" means all keys).
	KeyPrefix string
	// Now is the reference time for ages; zero means time.Now().
	Now time.Time
	// NoFrames reads each ring's header only (its creator and capacity),
	// not its frames: the scan then takes no ring lock at all, so it never
	// makes another process's receive miss (SPEC §3: contention is a miss)
	// nor delays a producer. Used, Ready, Done and ReadyKeys stay zero.
	NoFrames bool
}

func (o Options) withDefaults() Options {
	if o.Dir == "" {
		o.Dir = scope.ShmDir
	}
	if o.UID == 0 {
		o.UID = os.Getuid()
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	return o
}

// Producer is the liveness of a ring's creator.
type Producer string

// Producer states: the creator's start time matches (alive), does not or the
// process is gone (dead), or the header cannot tell (unknown).
const (
	Alive   Producer = "alive"
	Dead    Producer = "dead"
	Unknown Producer = "unknown"
)

// State is one snapshot of a uid's omnishm files.
type State struct {
	Dir      string    `json:"dir"`
	UID      int       `json:"uid"`
	Scopes   []Scope   `json:"scopes"`
	Segments []Segment `json:"segments"`
	Locks    []Lock    `json:"locks"`
}

// Scope is one deployment scope: a ring directory D, its rings, and the
// wake directory W whose path D hashes (SPEC §2).
type Scope struct {
	// Name is the wakeup scope string when it was given, else "".
	Name string `json:"name,omitempty"`
	// RingDir is D's name; RingDirExists says whether the directory exists.
	RingDir       string `json:"ring_dir"`
	RingDirExists bool   `json:"ring_dir_exists"`
	// WakeDir is W's path when it is known (given scope or found on disk).
	WakeDir       string `json:"wake_dir,omitempty"`
	WakeDirExists bool   `json:"wake_dir_exists"`
	Rings         []Ring `json:"rings"`
	// MarkersWithoutRing are marker names in D whose ring file is gone.
	MarkersWithoutRing []string   `json:"markers_without_ring"`
	FIFOs              []FIFO     `json:"fifos"`
	Sleepers           []Sleepers `json:"sleepers"`
}

// Ring is one ring file and what its header and live window say.
type Ring struct {
	Name string `json:"name"`
	From string `json:"from"`
	To   string `json:"to"`
	// PID is the producer pid in the file name; CreatorPID the header's.
	PID          int      `json:"pid"`
	CreatorPID   uint64   `json:"creator_pid"`
	CreatorStart uint64   `json:"creator_start"`
	Producer     Producer `json:"producer"`
	// Marker says whether the discovery marker D/{name} exists.
	Marker   bool   `json:"marker"`
	FileSize int64  `json:"file_size"`
	Capacity uint64 `json:"capacity"`
	// Busy: another process held the ring lock, so the frame counts were
	// not read (Scan never waits on it).
	Busy      bool     `json:"busy"`
	Used      uint64   `json:"used"`
	Ready     int      `json:"ready"`
	Done      int      `json:"done"`
	ReadyKeys []string `json:"ready_keys"`
	Age       Age      `json:"age_s"`
	// Head and Tail are the header's positions as read under the lock
	// (SPEC §3): head counts every byte ever put, tail every byte
	// reclaimed. Zero when Busy.
	Head uint64 `json:"head"`
	Tail uint64 `json:"tail"`
	// OldestReady is how long the oldest ready frame has been ready, as far
	// as a Tracker can tell: since the first of its scans that saw it (a
	// lower bound; frames carry no time). Zero from Scan alone.
	OldestReady Age `json:"oldest_ready_s,omitempty"`
	// Activity is what the ring did since a Tracker's previous scan; nil
	// from Scan alone, on a Tracker's first scan, and while Busy.
	Activity *Activity `json:"activity,omitempty"`
	// Error describes a header or frame that does not follow SPEC §3, or
	// why the file could not be read.
	Error string `json:"error,omitempty"`
	// Fault names what Error is about, one of the Fault constants, or
	// "cannot open: " and the reason (e.g. "permission denied").
	Fault string `json:"fault,omitempty"`

	read   bool        // head, tail and every frame were read
	frames []frameMark // the live window, tail to head, for a Tracker
}

// FIFO is one wakeup FIFO W/{stage}_{uuid}, or a receiver's temporary
// FIFO W/.tmp_{uuid} (Stage ""), which it renames into place once its read
// end is open: a receiver killed in between leaves it with no reader.
type FIFO struct {
	Name  string `json:"name"`
	Stage string `json:"stage"`
	// Reader says whether some process has it open for reading.
	Reader bool `json:"reader"`
	Age    Age  `json:"age_s"`
}

// Sleepers is one Go receiver's sleepers file W/.sleepers_{fifo} (package
// wake), which lives as long as that receiver's FIFO.
type Sleepers struct {
	Name string `json:"name"`
	// FIFO is the name of the FIFO it belongs to; FIFOExists says whether
	// that FIFO is in W, Reader whether some process reads it (its
	// receiver lives).
	FIFO       string `json:"fifo"`
	FIFOExists bool   `json:"fifo_exists"`
	Reader     bool   `json:"reader"`
	Age        Age    `json:"age_s"`
}

// Segment is one per-key segment /dev/shm/{key} (see the package doc).
type Segment struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
	Age  Age    `json:"age_s"`
}

// Lock is one lock file shm_{key}_lockfile.lock.
type Lock struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	// Segment says whether /dev/shm/{key} exists; Orphan whether the lock
	// file is an orphan by SPEC §6 (no segment, older than OrphanGrace).
	Segment bool `json:"segment"`
	Orphan  bool `json:"orphan"`
	Age     Age  `json:"age_s"`
}

// Age is a duration that marshals as seconds.
type Age time.Duration

// MarshalJSON writes the age in seconds with millisecond precision.
func (a Age) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, time.Duration(a).Seconds(), 'f', 3, 64), nil
}

// UnmarshalJSON reads seconds back.
func (a *Age) UnmarshalJSON(b []byte) error {
	s, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("shmstate: age %q: %w", b, err)
	}
	*a = Age(s * float64(time.Second))
	return nil
}

// String rounds the age for tables: 850ms, 12s, 3m4s.
func (a Age) String() string {
	d := time.Duration(a)
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// PruneOptions select what Prune removes.
type PruneOptions struct {
	Options
	// DryRun runs every check, including the non-blocking locks, and reports
	// what would be removed without removing anything.
	DryRun bool
	// SegmentsOlderThan, when positive, also removes per-key segments (and
	// their lock files) last written longer ago than this, if their lock can
	// be taken without waiting. Zero leaves every segment alone.
	SegmentsOlderThan time.Duration
	// FIFOGrace is how old a reader-less FIFO must be before it is removed,
	// so that one a receiver has just created and not yet opened is spared.
	FIFOGrace time.Duration
}

// Removal is one path Prune removed (or, in a dry run, would remove), or
// skipped and why.
type Removal struct {
	Path string `json:"path"`
	// What is ring, marker, lock, segment, fifo, sleepers or dir.
	What   string `json:"what"`
	Reason string `json:"reason"`
}

// Report is what one Prune did.
type Report struct {
	Removed []Removal `json:"removed"`
	Skipped []Removal `json:"skipped"`
}
