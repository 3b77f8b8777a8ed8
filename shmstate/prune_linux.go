package shmstate

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/proc"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/segment"
	"omnishm/wake"
)

// errSkip marks a candidate that failed its re-check: not an error, the
// file is simply not abandoned (any more).
var errSkip = errors.New("skip")

// errKeep marks a candidate that turned out not to be one (a directory that
// is not empty): neither removed nor worth reporting.
var errKeep = errors.New("keep")

func skip(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errSkip}, a...)...)
}

// Prune removes this uid's abandoned omnishm files (see the package doc).
// Each candidate found by Scan is re-checked just before removal, so files
// that became live in between are kept. Only unexpected failures are
// returned as errors; the rest are listed in Report.Skipped.
func Prune(o PruneOptions) (Report, error) {
	o.Options = o.withDefaults()
	st, err := Scan(o.Options)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	var errs []error
	note := func(r Removal, err error) {
		switch {
		case err == nil:
			rep.Removed = append(rep.Removed, r)
		case errors.Is(err, errSkip):
			r.Reason = strings.TrimPrefix(err.Error(), errSkip.Error()+": ")
			rep.Skipped = append(rep.Skipped, r)
		case errors.Is(err, unix.ENOENT), errors.Is(err, errKeep):
			// Someone else removed it first: nothing to report.
		default:
			errs = append(errs, fmt.Errorf("shmstate: prune %s: %w", r.Path, err))
		}
	}
	for _, sc := range st.Scopes {
		dir := filepath.Join(o.Dir, sc.RingDir)
		for _, r := range sc.Rings {
			if !r.Orphaned() {
				continue
			}
			path := filepath.Join(o.Dir, r.Name)
			marker := ""
			if r.Marker {
				marker = filepath.Join(dir, r.Name)
			}
			err := removeDeadRing(o, path, r.PID)
			if err == nil && marker != "" {
				note(Removal{Path: marker, What: "marker", Reason: "producer dead"}, nil)
			}
			note(Removal{Path: path, What: "ring", Reason: fmt.Sprintf("producer %d dead", r.PID)}, err)
		}
		for _, m := range sc.MarkersWithoutRing {
			note(Removal{Path: filepath.Join(dir, m), What: "marker", Reason: "ring file gone"}, removeStaleMarker(o, dir, m))
		}
		for _, f := range sc.FIFOs {
			if !f.Orphaned() {
				continue
			}
			note(Removal{Path: filepath.Join(sc.WakeDir, f.Name), What: "fifo", Reason: "no reader"}, removeFIFO(o, filepath.Join(sc.WakeDir, f.Name)))
		}
		for _, sl := range sc.Sleepers {
			if !sl.Orphaned() {
				continue
			}
			note(Removal{Path: filepath.Join(sc.WakeDir, sl.Name), What: "sleepers", Reason: "its FIFO " + sl.FIFO + " is gone"}, removeSleepers(o, sc.WakeDir, sl.FIFO, rep.Removed))
		}
		if sc.RingDirExists {
			note(Removal{Path: dir, What: "dir", Reason: "empty ring directory"}, removeRingDir(o, dir, sc.RingDir, rep.Removed))
		}
		if sc.WakeDirExists {
			note(Removal{Path: sc.WakeDir, What: "dir", Reason: "empty wake directory"}, removeWakeDir(o, sc.WakeDir, rep.Removed))
		}
	}
	// Lock files whose owner is provably gone go now: SPEC §6's check,
	// lock, re-check, with no grace.
	idle := unopenedLocks(o.Options)
	if len(idle) > 0 {
		lo := idleLockOptions(o.Options)
		lo.Match = func(key string) bool { // still the file found open nowhere
			var st unix.Stat_t
			return unix.Lstat(filepath.Join(o.Dir, scope.LockName(key)), &st) == nil && idle[key] == (proc.File{Dev: st.Dev, Ino: st.Ino})
		}
		sw, err := segment.Sweep(segment.SweepOptions{ListOptions: lo, DryRun: o.DryRun})
		rep.Removed = append(rep.Removed, removals(sw.Removed)...)
		rep.Skipped = append(rep.Skipped, removals(sw.Skipped)...)
		if err != nil {
			errs = append(errs, fmt.Errorf("shmstate: prune: %w", err))
		}
	}
	// The other orphan lock files (the grace is for what /proc cannot
	// clear) and old segments: SPEC §6's sweep, the segment package's.
	lo := o.lockOptions()
	if match := lo.Match; len(idle) > 0 { // judged above, even in a dry run
		lo.Match = func(key string) bool { _, done := idle[key]; return !done && (match == nil || match(key)) }
	}
	sw, err := segment.Sweep(segment.SweepOptions{ListOptions: lo, SegmentsOlderThan: o.SegmentsOlderThan, DryRun: o.DryRun})
	rep.Removed = append(rep.Removed, removals(sw.Removed)...)
	rep.Skipped = append(rep.Skipped, removals(sw.Skipped)...)
	if err != nil {
		errs = append(errs, fmt.Errorf("shmstate: prune: %w", err))
	}
	return rep, errors.Join(errs...)
}

func removals(swept []segment.Swept) []Removal {
	out := make([]Removal, 0, len(swept))
	for _, s := range swept {
		out = append(out, Removal{Path: s.Path, What: s.What, Reason: s.Reason})
	}
	return out
}

// sameFile reports whether fd is still the file at path (nobody replaced it
// since we opened it) and belongs to uid.
func sameFile(fd int, path string, uid int) (unix.Stat_t, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return a, err
	}
	if err := unix.Lstat(path, &b); err != nil {
		return a, err
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return a, skip("replaced while checking")
	}
	if int(a.Uid) != uid {
		return a, skip("owned by uid %d", a.Uid)
	}
	return a, nil
}

func openNoFollow(path string, flags int) (int, error) {
	return unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
}

// lockNoWait opens path without following a link, takes its flock without
// waiting (contention: skip with reason held) and checks that it is still
// the file at path and belongs to uid. The caller closes fd, which
// releases the lock.
func lockNoWait(path string, uid int, held string) (int, unix.Stat_t, error) {
	fd, err := openNoFollow(path, unix.O_RDONLY)
	if err != nil {
		return -1, unix.Stat_t{}, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return -1, unix.Stat_t{}, skip("%s", held)
	}
	st, err := sameFile(fd, path, uid)
	if err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// removeDeadRing re-checks, under the ring's own lock taken without
// waiting, that its producer is dead, then retires its marker (a registry
// update, SPEC §7) and unlinks the file while still holding the lock.
func removeDeadRing(o PruneOptions, path string, namePID int) error {
	fd, _, err := lockNoWait(path, o.UID, "ring lock held by another process")
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if l, ok := creatorLiveness(fd); ok {
		if l != Dead {
			return skip("producer alive")
		}
	} else if nameLiveness(namePID) != Dead {
		return skip("producer alive, header not written yet")
	}
	if o.DryRun {
		return nil
	}
	name := filepath.Base(path)
	rn, ok := scope.ParseRingName(o.UID, name)
	if !ok {
		return skip("not a ring name")
	}
	dir := filepath.Join(o.Dir, rn.Dir)
	err = ring.UpdateRegistry(dir, func(dirfd int) error {
		return ignoreNotExist(unix.Unlinkat(dirfd, name, 0))
	})
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("retire marker: %w", err)
	}
	return unix.Unlink(path)
}

// removeStaleMarker unlinks a marker whose ring file is gone, re-checking
// inside the registry update that the ring did not appear meanwhile.
func removeStaleMarker(o PruneOptions, dir, name string) error {
	check := func() error {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(o.Dir, name), &st); !errors.Is(err, unix.ENOENT) {
			return skip("ring file exists")
		}
		if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
			return err
		}
		if int(st.Uid) != o.UID {
			return skip("owned by uid %d", st.Uid)
		}
		return nil
	}
	if o.DryRun {
		return check()
	}
	return ring.UpdateRegistry(dir, func(dirfd int) error {
		if err := check(); err != nil {
			return err
		}
		return unix.Unlinkat(dirfd, name, 0)
	})
}

// lockDir opens the ring directory dir, not following a link, and takes
// its registry flock (SPEC §7); closing fd releases it.
func lockDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func ignoreNotExist(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// tempFIFOGrace is the least age of a temporary FIFO prune removes,
// whatever PruneOptions.FIFOGrace says: a starting receiver's has no reader
// between its mkfifo and its open, and removing it would fail that start.
const tempFIFOGrace = 2 * time.Second

// removeFIFO unlinks a wakeup FIFO that still has no reader and is older
// than the grace period (a receiver opens its FIFO right after creating it).
func removeFIFO(o PruneOptions, path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	grace := o.FIFOGrace
	if scope.IsTempFIFO(filepath.Base(path)) {
		grace = max(grace, tempFIFOGrace)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFIFO:
		return skip("not a FIFO")
	case int(st.Uid) != o.UID:
		return skip("owned by uid %d", st.Uid)
	case grace > 0 && o.Now.Sub(time.Unix(st.Ctim.Sec, st.Ctim.Nsec)) < grace:
		return skip("younger than %v", grace)
	case hasReader(path):
		return skip("has a reader")
	}
	if o.DryRun {
		return nil
	}
	return unix.Unlink(path)
}

// removeSleepers removes the sleepers file of FIFO fifo in the wake
// directory dir once its receiver is gone: its FIFO is gone (or goes in
// this prune), its receiver is not between making the file and publishing
// the FIFO (no temporary FIFO of the same id; older than the grace), and
// no process maps it, as far as /proc shows (a receiver maps its file as
// long as it lives). Without its FIFO the file serves no one: producers
// read a sleepers file only beside the FIFO they write, so even a live
// receiver's would cost no wakeup, only the writes it saves.
func removeSleepers(o PruneOptions, dir, fifo string, removed []Removal) error {
	path := filepath.Join(dir, scope.SleepersName(fifo))
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	if tmp, ok := scope.TempFIFOOf(fifo); ok && exists(filepath.Join(dir, tmp)) {
		return skip("its receiver is starting")
	}
	if exists(filepath.Join(dir, fifo)) && !removedUnder(dir, removed)[fifo] {
		return skip("its FIFO is still there")
	}
	switch {
	case int(st.Uid) != o.UID:
		return skip("owned by uid %d", st.Uid)
	case o.FIFOGrace > 0 && o.Now.Sub(time.Unix(st.Ctim.Sec, st.Ctim.Nsec)) < o.FIFOGrace:
		return skip("younger than %v", o.FIFOGrace)
	}
	// What /proc cannot tell (a container's init, even for root) does not
	// keep the file: see above.
	if pid, _ := proc.MappedBy(o.UID, path, st.Ino); pid > 0 {
		return skip("mapped by process %d", pid)
	}
	if err := wake.CheckSleepers(dir, fifo); errors.Is(err, wake.ErrNotSleepers) {
		return skip("not a sleepers file")
	} else if err != nil || o.DryRun {
		return err
	}
	if err := wake.RemoveSleepers(dir, fifo); errors.Is(err, wake.ErrNotSleepers) {
		return skip("not a sleepers file")
	} else if err != nil {
		return err
	}
	return nil
}

func exists(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil
}

// removedUnder counts the removals (done or planned) directly inside dir.
func removedUnder(dir string, removed []Removal) map[string]bool {
	m := map[string]bool{}
	for _, r := range removed {
		if filepath.Dir(r.Path) == dir {
			m[filepath.Base(r.Path)] = true
		}
	}
	return m
}

// emptyAfter reports whether dir holds nothing but the names in gone.
func emptyAfter(dir string, gone map[string]bool) (bool, error) {
	names, err := readNames(dir)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if !gone[n] {
			return false, nil
		}
	}
	return true, nil
}

// removeRingDir removes an empty ring directory under its registry lock,
// but never while a ring file of the scope exists: a producer creates the
// directory, then its ring, then the marker (seed shm_ring.py put), and
// must not lose the directory in between.
func removeRingDir(o PruneOptions, dir, ringDir string, removed []Removal) error {
	gone := removedUnder(dir, removed)
	if empty, err := emptyAfter(dir, gone); err != nil || !empty {
		return keepUnless(err)
	}
	if live, err := ringFilesOf(o, ringDir, removedUnder(o.Dir, removed)); err != nil || live {
		return keepUnless(err)
	}
	if o.DryRun {
		return nil
	}
	fd, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if live, err := ringFilesOf(o, ringDir, nil); err != nil || live {
		return keepUnless(err)
	}
	return ignoreNotEmpty(unix.Rmdir(dir))
}

// ringFilesOf reports whether a ring file of ring directory D exists,
// other than the names in gone.
func ringFilesOf(o PruneOptions, ringDir string, gone map[string]bool) (bool, error) {
	names, err := readNames(o.Dir)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if strings.HasPrefix(n, ringDir+"_") && !gone[n] {
			return true, nil
		}
	}
	return false, nil
}

// removeWakeDir removes an empty wake directory; rmdir itself refuses a
// directory that gained a FIFO meanwhile.
func removeWakeDir(o PruneOptions, dir string, removed []Removal) error {
	if empty, err := emptyAfter(dir, removedUnder(dir, removed)); err != nil || !empty {
		return keepUnless(err)
	}
	if o.DryRun {
		return nil
	}
	return ignoreNotEmpty(unix.Rmdir(dir))
}

func ignoreNotEmpty(err error) error {
	if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		return errKeep
	}
	return err
}

func keepUnless(err error) error {
	if err == nil {
		return errKeep
	}
	return err
}

// unopenedLocks returns the keys (with their inodes) of o's lock files whose segment is gone
// and that no process has open. A producer holds its lock file open from
// before it creates it until its put is complete (SPEC §6), so none of
// these can be a put in progress: its owner is provably gone. Empty when
// /proc cannot list every process's open files (then only the grace
// tells).
func unopenedLocks(o Options) map[string]proc.File {
	locks, err := segment.Locks(idleLockOptions(o))
	if err != nil {
		return nil
	}
	candidates := map[proc.File]string{}
	var files []proc.File
	for _, l := range locks {
		var st unix.Stat_t
		if l.Orphan && unix.Lstat(l.Path, &st) == nil {
			f := proc.File{Dev: st.Dev, Ino: st.Ino}
			candidates[f] = l.Key
			files = append(files, f)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	open, complete := proc.OpenAnywhere(files)
	if !complete {
		return nil // cannot tell what some process holds
	}
	idle := map[string]proc.File{}
	for f, key := range candidates {
		if !open[f] {
			idle[key] = f
		}
	}
	return idle
}

// idleLockOptions list o's lock files with Orphan meaning "segment gone"
// whatever their age: for a lock file open nowhere the age proves nothing
// more (and a clock ahead of o.Now must not hide one).
func idleLockOptions(o Options) segment.ListOptions {
	lo := o.lockOptions()
	lo.Now, lo.Grace = time.Now().Add(24*time.Hour), time.Nanosecond
	return lo
}
