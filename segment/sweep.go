//go:build linux

package segment

import (
	"errors"
	"fmt"
	"os"
	"time"

	"omnishm/keys"
	"omnishm/scope"
)

// OrphanGrace is how old a lock file without a segment must be before a
// sweep removes it (SPEC §6): younger ones may belong to a put in progress.
const OrphanGrace = 60 * time.Second

// ListOptions select the lock files Locks lists. The zero value lists this
// user's lock files in DefaultDir, judged now with OrphanGrace.
type ListOptions struct {
	// Dir is the shared directory; empty means DefaultDir.
	Dir string
	// UID owns the files considered; 0 means this process's effective uid
	// (the owner of the files it creates). Files of other owners are
	// neither listed nor removed.
	UID int
	// Now is the reference time for ages; zero means time.Now().
	Now time.Time
	// Grace is how old a lock file without a segment must be to be an
	// orphan; zero or less means OrphanGrace.
	Grace time.Duration
	// Match, when set, keeps only the keys it accepts.
	Match func(key string) bool
}

func (o ListOptions) withDefaults() ListOptions {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.UID == 0 {
		o.UID = os.Geteuid()
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Grace <= 0 {
		o.Grace = OrphanGrace
	}
	return o
}

// LockFile is one lock file {Dir}/shm_{key}_lockfile.lock and the state of
// its key, as Locks saw it.
type LockFile struct {
	Key     string
	Path    string
	ModTime time.Time
	// Segment says that a segment of UID sits beside the lock file: a
	// regular file at {Dir}/{key} that is not a ring file (SPEC §2), with
	// its size and modification time.
	Segment        bool
	SegmentSize    int64
	SegmentModTime time.Time
	// Orphan says that nothing at all is at {Dir}/{key} and the lock file
	// was last changed more than Grace before Now (SPEC §6): Sweep removes
	// it after checking again under its lock.
	Orphan bool

	id fileID // the lock file Locks saw, for Sweep's re-check
}

// Locks lists UID's lock files in Dir, sorted by name, with what is beside
// each. It changes nothing and takes no lock. A lock file whose key
// keys.Check refuses, and a symlink or other non-regular file at a lock
// file's name, is not listed; a missing Dir holds no lock files.
func Locks(o ListOptions) ([]LockFile, error) {
	o = o.withDefaults()
	entries, err := os.ReadDir(o.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("segment: list locks: %w", err)
	}
	var out []LockFile
	for _, e := range entries {
		key, ok := scope.LockKey(e.Name())
		if !ok || keys.Check(key) != nil || (o.Match != nil && !o.Match(key)) {
			continue
		}
		path := o.Dir + "/" + e.Name()
		lock, err := lstatFile(path)
		if err != nil || !lock.regular || lock.uid != o.UID {
			continue // gone meanwhile, or not ours to judge
		}
		l := LockFile{Key: key, Path: path, ModTime: lock.mtime, id: lock.id}
		switch seg, err := lstatFile(o.Dir + "/" + key); {
		case err == errGone:
			l.Orphan = o.Now.Sub(lock.mtime) > o.Grace
		case err != nil:
			// Cannot tell: neither a segment nor an orphan.
		case seg.regular && seg.uid == o.UID && !isRingFile(o.UID, key):
			l.Segment, l.SegmentSize, l.SegmentModTime = true, seg.size, seg.mtime
		}
		out = append(out, l)
	}
	return out, nil
}

// isRingFile reports whether name is a host ring file's: a lock file beside
// one does not make the ring a segment to remove.
func isRingFile(uid int, name string) bool {
	_, ok := scope.ParseRingName(uid, name)
	return ok
}

// SweepOptions configure Sweep. The zero value removes this user's orphan
// lock files in DefaultDir and nothing else.
type SweepOptions struct {
	ListOptions
	// SegmentsOlderThan, when positive, also retires segments last written
	// longer ago than this, with their lock files, as a receiver claims one
	// (without reading it), if their lock can be taken without waiting.
	// Zero leaves every segment alone.
	SegmentsOlderThan time.Duration
	// DryRun runs every check, including the non-blocking locks, and reports
	// what would be removed without removing anything.
	DryRun bool
}

// Swept is one file Sweep removed (in a dry run: would remove) or kept
// after a closer look, and why.
type Swept struct {
	Key  string
	Path string
	// What is "lock" or "segment".
	What   string
	Reason string
}

// SweepReport is what one Sweep did. A file that was no candidate at the
// first look (a young lock file, one beside its segment), or that someone
// else removed meanwhile, is in neither list.
type SweepReport struct {
	Removed []Swept
	Skipped []Swept
}

// Sweep removes the per-key files a crashed producer or receiver left
// behind (SPEC §6). Each orphan lock file Locks finds is checked again
// under its lock, taken without waiting: the same file (device and inode),
// still UID's, still older than Grace, its segment still absent; only then
// is it unlinked, so a lock file in use is never removed. With
// SegmentsOlderThan it also retires old segments as a receiver claims one:
// lock without waiting, check, unlink the segment, then the lock file while
// still holding it. Only unexpected failures are errors, joined; it goes on
// past them.
func Sweep(o SweepOptions) (SweepReport, error) {
	o.ListOptions = o.withDefaults()
	locks, err := Locks(o.ListOptions)
	if err != nil {
		return SweepReport{}, err
	}
	var rep SweepReport
	var errs []error
	for _, l := range locks {
		switch {
		case l.Orphan:
			if err := o.sweepOrphan(l); err != nil {
				errs = append(errs, rep.skipOr(Swept{l.Key, l.Path, "lock", ""}, err))
				break
			}
			rep.Removed = append(rep.Removed, Swept{l.Key, l.Path, "lock", "orphan: segment gone"})
		case l.Segment && o.SegmentsOlderThan > 0:
			seg := Swept{l.Key, o.Dir + "/" + l.Key, "segment", ""}
			if err := o.sweepSegment(l); err != nil {
				errs = append(errs, rep.skipOr(seg, err))
				break
			}
			seg.Reason = "older than " + o.SegmentsOlderThan.String()
			rep.Removed = append(rep.Removed, seg, Swept{l.Key, l.Path, "lock", "its segment was removed"})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("segment: sweep: %w", err)
	}
	return rep, nil
}

// skipReason is a candidate that failed its check under the lock: not an
// error, the file is simply not abandoned (any more).
type skipReason string

func (s skipReason) Error() string { return string(s) }

// skipOr files a skip in rep and forgets a file that is gone; it returns
// any other error.
func (rep *SweepReport) skipOr(s Swept, err error) error {
	var why skipReason
	switch {
	case errors.As(err, &why):
		s.Reason = string(why)
		rep.Skipped = append(rep.Skipped, s)
	case errors.Is(err, errBusy):
		s.Reason = "lock held"
		rep.Skipped = append(rep.Skipped, s)
	case errors.Is(err, errReplaced):
		s.Reason = "replaced while checking"
		rep.Skipped = append(rep.Skipped, s)
	case errors.Is(err, errGone), errors.Is(err, os.ErrNotExist):
		// Someone else removed it first: nothing to report.
	default:
		return err
	}
	return nil
}

// lockNoWait takes the lock of l without waiting and checks that the locked
// file is the one Locks saw, still UID's and, unless cutoff is zero, last
// changed before cutoff (SPEC §6's re-check). The caller closes fd.
func (o SweepOptions) lockNoWait(l LockFile, cutoff time.Time) (int, error) {
	fd, held, err := lockFile(l.Path, false)
	if err != nil {
		return -1, err
	}
	var why error
	switch {
	case held.id != l.id:
		why = errReplaced
	case held.uid != o.UID:
		why = skipReason(fmt.Sprintf("owned by uid %d", held.uid))
	case !cutoff.IsZero() && !held.mtime.Before(cutoff):
		why = skipReason("younger than " + o.Grace.String())
	default:
		return fd, nil
	}
	closeFD(fd)
	return -1, why
}

// sweepOrphan removes the orphan lock file l after checking it again
// under its lock: same file, own uid, still old, segment still absent.
func (o SweepOptions) sweepOrphan(l LockFile) error {
	fd, err := o.lockNoWait(l, o.Now.Add(-o.Grace))
	if err != nil {
		return err
	}
	defer closeFD(fd)
	if _, err := lstatFile(o.Dir + "/" + l.Key); err != errGone {
		return skipReason("segment exists")
	}
	if o.DryRun {
		return nil
	}
	_, err = remove(l.Path)
	return err
}

// sweepSegment retires l's old segment the way a receiver claims one: under
// the lock taken without waiting, it checks the segment (a regular file of
// UID, older than SegmentsOlderThan), unlinks it, then the lock file.
func (o SweepOptions) sweepSegment(l LockFile) error {
	// The lock file's own age does not matter here: the segment's does.
	fd, err := o.lockNoWait(l, time.Time{})
	if err != nil {
		return err
	}
	defer closeFD(fd)
	segPath := o.Dir + "/" + l.Key
	seg, err := lstatFile(segPath)
	switch {
	case err != nil:
		return err
	case !seg.regular:
		return skipReason("not a regular file")
	case seg.uid != o.UID:
		return skipReason(fmt.Sprintf("owned by uid %d", seg.uid))
	case o.Now.Sub(seg.mtime) <= o.SegmentsOlderThan:
		return skipReason("younger than " + o.SegmentsOlderThan.String())
	}
	if o.DryRun {
		return nil
	}
	if _, err := remove(segPath); err != nil {
		return err
	}
	_, err = remove(l.Path)
	return err
}
