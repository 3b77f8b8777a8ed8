package wake

import (
	"errors"
	"path/filepath"

	"golang.org/x/sys/unix"

	"omnishm/fswatch"
)

// watchMask covers every way a FIFO can appear in or leave the directory
// (fswatch adds the directory itself going away).
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// parentMask covers the ways the wake directory can appear in its parent.
const parentMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ONLYDIR

// watchState is where an inotifyWatch stands, as Notify last saw it.
type watchState int

const (
	unarmed  watchState = iota // no watch yet, or the last one was lost
	watching                   // the directory is watched
	absent                     // no directory: its parent is watched instead
)

// inotifyWatch follows the wake directory with inotify (package fswatch),
// off the put path: fswatch's background reader, parked in the runtime
// poller, moves the watch's epoch on each event, so an unchanged directory
// costs Notify one atomic load and no system call. See Notifier for the
// synchronous check that closes the window while an event is still on its
// way.
//
// A missing directory is followed through a watch on its parent in a
// second, passive instance that only Notify reads, without blocking: the
// parent (/dev/shm) is busy with every process's segments, and nobody
// should wake for those. That costs one read per synchronous check, and no
// path lookup, until the directory appears.
//
// Everything here belongs to the caller of changed and close (Notifier.mu).
type inotifyWatch struct {
	dir, parent, base string

	fs       *fswatch.Watcher // the directory's instance, read in the background
	dirWatch *fswatch.Watch   // nil when the directory is not watched
	seen     uint64           // dirWatch's epoch at the last changed
	state    watchState

	pfs   *fswatch.Watcher // the parent's instance, passive; nil until needed
	pw    *fswatch.Watch   // the parent's watch for the directory's name; nil when not set
	pseen uint64           // pw's epoch at the last drainParent

	// stat replaces inotify after a watch could not be added for another
	// reason than a missing directory (such as the watch limit).
	stat   *statWatch
	closed bool
	// checks counts the system calls changed made, lookups the path
	// lookups among them: tests assert on both.
	checks, lookups int
}

func newWatcher(dir string) watcher { return newInotifyWatch(dir, true) }

// newInotifyWatch follows dir; background false leaves the directory's
// instance to synchronous checks only (tests of a reader that cannot run).
func newInotifyWatch(dir string, background bool) watcher {
	fs, err := fswatch.New(background)
	if err != nil {
		return &statWatch{dir: dir, why: err}
	}
	return &inotifyWatch{dir: dir, parent: filepath.Dir(dir), base: filepath.Base(dir), fs: fs}
}

func (w *inotifyWatch) changed(now bool) bool {
	if w.stat != nil {
		return w.stat.changed(now)
	}
	switch w.state {
	case unarmed:
		return w.arm()
	case absent:
		// The parent's instance is passive: its queue is read here, when a
		// put asks for it, and only then.
		if !now || !w.drainParent() {
			return false
		}
		return w.arm()
	}
	if w.dirWatch.Epoch() == w.seen && (now || !w.fs.Background()) {
		// An event may be queued that the reader has not taken yet: Sync
		// applies it (one read); an event the reader took has moved the
		// epoch already.
		w.checks++
		w.fs.Sync()
	}
	e := w.dirWatch.Epoch()
	if e == w.seen {
		return false
	}
	w.seen = e
	if w.dirWatch.Lost() {
		return w.arm()
	}
	return true
}

// still implements stillWatcher: watched with a background reader, the
// directory is unchanged while its watch's epoch is the one changed last
// saw (a lost watch moves it too); absent, changed(false) reads nothing.
// w.stat, an unarmed watch or a passive reader need changed itself.
func (w *inotifyWatch) still() func() bool {
	switch {
	case w.stat != nil || w.closed:
		return nil
	case w.state == absent:
		return func() bool { return true }
	case w.state == watching && w.fs.Background():
		fs, dw, seen := w.fs, w.dirWatch, w.seen
		return func() bool { return dw.Epoch() == seen && fs.Background() }
	}
	return nil
}

// arm watches the directory, or its parent while it does not exist. It
// reports a change: whatever happened before the watch needs a scan.
func (w *inotifyWatch) arm() bool {
	if w.dirWatch != nil {
		w.checks++
		w.dirWatch.Remove()
		w.dirWatch = nil
	}
	if w.watchDir() {
		return true
	}
	if w.pfs == nil {
		w.checks++
		pfs, err := fswatch.New(false)
		if err != nil {
			w.fallBack(err)
			return true
		}
		w.pfs = pfs
	}
	if w.pw == nil {
		w.checks++
		w.lookups++
		pw, err := w.pfs.AddEntry(w.parent, w.base, parentMask)
		if err != nil {
			w.fallBack(err)
			return true
		}
		w.pw, w.pseen = pw, pw.Epoch()
	}
	// Discard what the parent's queue holds: the second attempt covers it,
	// and anything later is queued for drainParent.
	w.drainParent()
	if !w.watchDir() {
		w.state = absent
	}
	return true
}

// watchDir tries to watch the directory; false means it does not exist.
func (w *inotifyWatch) watchDir() bool {
	w.checks++
	w.lookups++
	x, err := w.fs.Add(w.dir, watchMask)
	switch {
	case err == nil:
		w.dirWatch, w.seen, w.state = x, x.Epoch(), watching
		if w.pw != nil {
			// Stop queueing /dev/shm's traffic nobody will read.
			w.checks++
			w.pw.Remove()
			w.pw = nil
		}
		return true
	case errors.Is(err, unix.ENOENT):
		return false
	}
	w.fallBack(err)
	return true
}

// drainParent reads the parent instance until it is empty and reports
// whether an event may concern the directory: it was created or moved in,
// the queue overflowed, or the parent watch is lost (it is then set again
// by the arm that follows).
func (w *inotifyWatch) drainParent() bool {
	for {
		w.checks++
		if !w.pfs.Sync() {
			break
		}
	}
	if w.pw == nil {
		return true
	}
	e := w.pw.Epoch()
	maybe := e != w.pseen
	w.pseen = e
	if w.pw.Lost() {
		w.pw.Remove()
		w.pw = nil
	}
	return maybe
}

// fallBack replaces inotify with the mtime check for good, because of why.
func (w *inotifyWatch) fallBack(why error) {
	w.stat = &statWatch{dir: w.dir, why: why}
	w.release()
}

func (w *inotifyWatch) err() error {
	if w.stat != nil {
		return w.stat.err()
	}
	return nil
}

// release stops the reader and closes both instances; it waits for the
// reader to return, so no goroutine outlives it.
func (w *inotifyWatch) release() error {
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.fs.Close()
	if w.pfs != nil {
		err = errors.Join(err, w.pfs.Close())
		w.pfs, w.pw = nil, nil
	}
	return err
}

func (w *inotifyWatch) close() error { return w.release() }
