package shmstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/proc"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/segment"
)

// entry is one lstat'ed name in a directory.
type entry struct {
	name string
	st   unix.Stat_t
}

func (e entry) isDir() bool     { return e.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (e entry) isRegular() bool { return e.st.Mode&unix.S_IFMT == unix.S_IFREG }
func (e entry) isFIFO() bool    { return e.st.Mode&unix.S_IFMT == unix.S_IFIFO }
func (e entry) mtime() time.Time {
	return time.Unix(e.st.Mtim.Sec, e.st.Mtim.Nsec)
}

// listOwn lstats every name in dir that belongs to uid. A missing dir is an
// empty list: scopes come and go while we look.
func listOwn(dir string, uid int) ([]entry, error) {
	names, err := readNames(dir)
	if err != nil {
		return nil, err
	}
	var out []entry
	for _, n := range names {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, n), &st) != nil || int(st.Uid) != uid {
			continue
		}
		out = append(out, entry{name: n, st: st})
	}
	return out, nil
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("shmstate: list %s: %w", dir, err)
	}
	slices.Sort(names)
	return names, nil
}

// layout indexes one listing of the shared-memory directory.
type layout struct {
	ringDirs  map[string]entry   // D -> dir entry
	wakeDirs  map[string]entry   // D -> the wake dir whose path D hashes
	ringFiles map[string][]entry // D -> ring files
}

func readLayout(o Options) (layout, error) {
	l := layout{
		ringDirs:  map[string]entry{},
		wakeDirs:  map[string]entry{},
		ringFiles: map[string][]entry{},
	}
	entries, err := listOwn(o.Dir, o.UID)
	if err != nil {
		return l, err
	}
	for _, e := range entries {
		switch {
		case e.isDir() && scope.IsRingDirName(o.UID, e.name):
			l.ringDirs[e.name] = e
		case e.isDir():
			if d, ok := scope.RingDirOfWakeDir(o.UID, e.name); ok {
				l.wakeDirs[d] = e
			}
		case e.isRegular():
			if rn, ok := scope.ParseRingName(o.UID, e.name); ok {
				l.ringFiles[rn.Dir] = append(l.ringFiles[rn.Dir], e)
			}
		}
	}
	return l, nil
}

// scopeDirs returns the ring directory names to show, and the scope string
// and wake dir name of each one that was asked for by name.
func (l layout) scopeDirs(o Options) (dirs []string, names map[string]string, wake map[string]string) {
	names, wake = map[string]string{}, map[string]string{}
	if o.Scopes != nil {
		for _, s := range o.Scopes {
			n := scope.ForUID(o.UID, s, os.Getppid())
			dirs = append(dirs, n.RingDirName)
			names[n.RingDirName] = s
			wake[n.RingDirName] = filepath.Base(n.WakeDir)
		}
		return dirs, names, wake
	}
	seen := map[string]bool{}
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for d := range l.ringDirs {
		add(d)
	}
	for d, e := range l.wakeDirs {
		add(d)
		wake[d] = e.name
	}
	for d := range l.ringFiles {
		add(d)
	}
	slices.Sort(dirs)
	return dirs, names, wake
}

// Scan reads the current state without modifying anything and without
// waiting on any lock.
func Scan(o Options) (*State, error) {
	o = o.withDefaults()
	l, err := readLayout(o)
	if err != nil {
		return nil, err
	}
	st := &State{Dir: o.Dir, UID: o.UID, Scopes: []Scope{}, Segments: []Segment{}, Locks: []Lock{}}
	dirs, names, wake := l.scopeDirs(o)
	for _, d := range dirs {
		sc, err := scanScope(o, l, d, names[d], wake[d])
		if err != nil {
			return nil, err
		}
		st.Scopes = append(st.Scopes, sc)
	}
	// The per-key files are the segment package's to list and judge.
	locks, err := segment.Locks(o.lockOptions())
	if err != nil {
		return nil, err
	}
	for _, l := range locks {
		st.Locks = append(st.Locks, Lock{Key: l.Key, Name: filepath.Base(l.Path), Segment: l.Segment, Orphan: l.Orphan, Age: Age(o.Now.Sub(l.ModTime))})
		if l.Segment {
			st.Segments = append(st.Segments, Segment{Key: l.Key, Size: l.SegmentSize, Age: Age(o.Now.Sub(l.SegmentModTime))})
		}
	}
	return st, nil
}

// lockOptions selects o's per-key files: o.UID's in o.Dir, keys starting
// with o.KeyPrefix, orphans judged at o.Now with OrphanGrace.
func (o Options) lockOptions() segment.ListOptions {
	l := segment.ListOptions{Dir: o.Dir, UID: o.UID, Now: o.Now, Grace: OrphanGrace}
	if o.KeyPrefix != "" {
		l.Match = func(key string) bool { return strings.HasPrefix(key, o.KeyPrefix) }
	}
	return l
}

func scanScope(o Options, l layout, d, name, wakeName string) (Scope, error) {
	sc := Scope{Name: name, RingDir: d, Rings: []Ring{}, MarkersWithoutRing: []string{}, FIFOs: []FIFO{}, Sleepers: []Sleepers{}}
	_, sc.RingDirExists = l.ringDirs[d]
	markers := map[string]bool{}
	if sc.RingDirExists {
		entries, err := listOwn(filepath.Join(o.Dir, d), o.UID)
		if err != nil {
			return sc, err
		}
		for _, e := range entries {
			if e.isRegular() {
				markers[e.name] = true
			}
		}
	}
	rings := map[string]bool{}
	for _, e := range l.ringFiles[d] {
		rings[e.name] = true
		r := inspectRing(filepath.Join(o.Dir, e.name), e, o)
		r.Marker = markers[e.name]
		sc.Rings = append(sc.Rings, r)
	}
	for m := range markers {
		if rings[m] {
			continue
		}
		// A file at the ring's name that is not listed as ours is not
		// "no ring": say what it is.
		if r, ok := unlistedRing(filepath.Join(o.Dir, m), m, o); ok {
			sc.Rings = append(sc.Rings, r)
			continue
		}
		sc.MarkersWithoutRing = append(sc.MarkersWithoutRing, m)
	}
	slices.Sort(sc.MarkersWithoutRing)
	if wakeName != "" {
		sc.WakeDir = filepath.Join(o.Dir, wakeName)
		// Only a real directory of ours: a symlink planted at W's name
		// must not lead Prune to FIFOs elsewhere.
		var wst unix.Stat_t
		sc.WakeDirExists = unix.Lstat(sc.WakeDir, &wst) == nil && wst.Mode&unix.S_IFMT == unix.S_IFDIR && int(wst.Uid) == o.UID
		var entries []entry
		if sc.WakeDirExists {
			var err error
			if entries, err = listOwn(sc.WakeDir, o.UID); err != nil {
				return sc, err
			}
		}
		for _, e := range entries {
			stage, ok := scope.FIFOStage(e.name)
			if !ok && !scope.IsTempFIFO(e.name) || !e.isFIFO() {
				continue
			}
			sc.FIFOs = append(sc.FIFOs, FIFO{Name: e.name, Stage: stage, Reader: hasReader(filepath.Join(sc.WakeDir, e.name)), Age: Age(o.Now.Sub(e.mtime()))})
		}
		for _, e := range entries {
			fifo, ok := scope.SleepersFIFO(e.name)
			if !ok || !e.isRegular() {
				continue
			}
			sl := Sleepers{Name: e.name, FIFO: fifo, Age: Age(o.Now.Sub(e.mtime()))}
			if i := slices.IndexFunc(sc.FIFOs, func(f FIFO) bool { return f.Name == fifo }); i >= 0 {
				sl.FIFOExists, sl.Reader = true, sc.FIFOs[i].Reader
			}
			sc.Sleepers = append(sc.Sleepers, sl)
		}
	}
	return sc, nil
}

// inspectRing reads one ring file through ring.Inspect, which reads the
// header's identity without the lock and the frames under it, taken only
// without waiting (Busy instead; SPEC §3: frames are read under it).
func inspectRing(path string, e entry, o Options) Ring {
	rn, _ := scope.ParseRingName(o.UID, e.name)
	r := Ring{Name: e.name, From: rn.From, To: rn.To, PID: rn.PID, FileSize: e.st.Size, ReadyKeys: []string{}, Age: Age(o.Now.Sub(e.mtime()))}
	inspect := ring.Inspect
	if o.NoFrames {
		inspect = ring.InspectHeader
	}
	info, err := inspect(path)
	r.Fault = faultOf(err)
	if info.Header == (ring.Header{}) { // the header was not read
		// Not initialised yet, not a ring, or not readable: the name's pid
		// is all we have.
		r.Error, r.Producer = FaultNotWritten, nameLiveness(rn.PID)
		if err != nil && !errors.Is(err, ring.ErrNotInitialized) {
			r.Error = err.Error()
		}
		return r
	}
	r.Capacity, r.CreatorPID, r.CreatorStart = info.Header.Capacity, info.Header.CreatorPID, info.Header.CreatorStart
	r.Producer = producerOf(info.Producer)
	if info.Busy {
		r.Busy = true
		return r
	}
	if o.NoFrames {
		return r
	}
	if info.Header.Head >= info.Header.Tail { // else the fault says so
		r.Used = info.Header.Head - info.Header.Tail
	}
	r.Head, r.Tail = info.Header.Head, info.Header.Tail
	c := countFrames(info.Frames)
	r.Ready, r.Done, r.ReadyKeys = c.ready, c.done, c.readyKeys
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.read, r.frames = true, marks(info.Frames)
	return r
}

// unlistedRing describes a file at a marker's ring name that is not a
// regular file of o.UID: ok is false when there is none.
func unlistedRing(path, name string, o Options) (Ring, bool) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return Ring{}, false
	}
	rn, _ := scope.ParseRingName(o.UID, name)
	r := Ring{Name: name, From: rn.From, To: rn.To, PID: rn.PID, Marker: true, FileSize: st.Size, ReadyKeys: []string{},
		Producer: nameLiveness(rn.PID), Age: Age(o.Now.Sub(entry{st: st}.mtime()))}
	r.Fault = FaultNotRing
	if int(st.Uid) != o.UID {
		r.Fault = FaultForeign
	}
	// O_NONBLOCK: a FIFO must not hang us.
	if fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
		r.Fault = faultOf(err)
	} else {
		unix.Close(fd)
	}
	r.Error = fmt.Sprintf("%s: %s (uid %d, mode %#o)", path, r.Fault, st.Uid, st.Mode)
	return r, true
}

// ScanRing reads one ring file as Scan does (never waiting on its lock),
// given its path in o.Dir: for a process that knows its own rings and
// would not list the directory. Its marker is looked up in the ring
// directory its name belongs to. The error wraps fs.ErrNotExist when the
// file is gone; a file that is not a ring of o.UID is an error too.
func ScanRing(path string, o Options) (Ring, error) {
	o = o.withDefaults()
	name := filepath.Base(path)
	rn, ok := scope.ParseRingName(o.UID, name)
	if !ok {
		return Ring{}, fmt.Errorf("shmstate: %s is not a ring name of uid %d", path, o.UID)
	}
	e := entry{name: name}
	if err := unix.Lstat(path, &e.st); err != nil {
		return Ring{}, fmt.Errorf("shmstate: %w", &os.PathError{Op: "lstat", Path: path, Err: err})
	}
	if !e.isRegular() || int(e.st.Uid) != o.UID {
		return Ring{}, fmt.Errorf("shmstate: %s is not a regular file of uid %d", path, o.UID)
	}
	r := inspectRing(path, e, o)
	var st unix.Stat_t
	r.Marker = unix.Lstat(filepath.Join(filepath.Dir(path), rn.Dir, name), &st) == nil
	return r, nil
}

// creatorLiveness reads the header of the ring file open at fd and judges
// its creator (SPEC §3, §7); ok is false while the header is not written
// (or the file is not a ring). proc says Unknown when /proc cannot tell, so
// Prune never removes a live producer's ring on doubt.
func creatorLiveness(fd int) (l Producer, ok bool) {
	var b [ring.HeaderSize]byte
	n, err := unix.Pread(fd, b[:], 0)
	if err != nil {
		return Unknown, false
	}
	h, err := ring.ReadHeader(b[:max(n, 0)])
	if err != nil {
		return Unknown, false
	}
	return producerOf(proc.Check(h.Creator())), true
}

// nameLiveness is all that can be said from the pid in a ring's name: a
// running process might still be initialising the header.
func nameLiveness(pid int) Producer {
	if proc.Gone(pid) {
		return Dead
	}
	return Unknown
}

func producerOf(l proc.Liveness) Producer { return Producer(l.String()) }

// hasReader reports whether a FIFO has a reader: opening it for writing
// without blocking fails with ENXIO exactly when none has it open. Any
// other failure counts as "has a reader" so it is never pruned on doubt.
func hasReader(path string) bool {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return true
	}
	return !errors.Is(err, unix.ENXIO)
}
