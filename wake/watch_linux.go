package wake

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// watchMask covers every way a FIFO can appear in or leave the directory,
// and the directory itself going away.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// parentMask covers the ways the wake directory can appear in its parent.
const parentMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ONLYDIR

// lostMask marks events after which a watch no longer follows its path.
const lostMask = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_IGNORED | unix.IN_Q_OVERFLOW

// watchState is where an inotifyWatch stands, as Notify last saw it.
type watchState int

const (
	unarmed  watchState = iota // no watch yet, or the last one was lost
	watching                   // the directory is watched
	absent                     // no directory: its parent is watched instead
)

// inotifyWatch follows the wake directory with inotify, off the put path: a
// goroutine blocks on the instance (through the netpoller) and advances an
// atomic epoch on each event, so an unchanged directory costs Notify one
// atomic load and no system call. See Notifier for the synchronous check
// that closes the window while an event is still on its way.
//
// A missing directory is followed through a watch on its parent in a
// second instance that only Notify reads, without blocking: the parent
// (/dev/shm) is busy with every process's segments, and nobody should wake
// for those. That costs one read per Notify, and no path lookup, until the
// directory appears.
type inotifyWatch struct {
	dir, parent, base string

	// Shared with the reader goroutine.
	fd     int      // the directory's instance, non-blocking
	file   *os.File // fd, as the reader polls it
	wd     atomic.Int32
	epoch  atomic.Uint64 // advances on every event of wd
	lost   atomic.Bool   // wd no longer follows dir: watch the path again
	dead   atomic.Bool   // the reader stopped by itself: check synchronously
	stop   atomic.Bool   // close asked the reader to stop
	done   chan struct{} // closed when the reader returns
	readMu sync.Mutex    // a read of fd and the epoch advance it causes
	buf    [4096]byte    // readMu

	// The rest belongs to the caller of changed and close (Notifier.mu).
	seen     uint64 // epoch at the last changed
	state    watchState
	pfd, pwd int // parent instance and watch; -1 when not set up
	pbuf     [4096]byte
	// stat replaces inotify after a watch could not be added for another
	// reason than a missing directory (such as the watch limit).
	stat   *statWatch
	closed bool
	// checks counts the system calls changed made, lookups the path
	// lookups among them: tests assert on both.
	checks, lookups int
}

func newWatcher(dir string) watcher {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return &statWatch{dir: dir}
	}
	w := &inotifyWatch{
		dir: dir, parent: filepath.Dir(dir), base: filepath.Base(dir),
		fd: fd, file: os.NewFile(uintptr(fd), "inotify:"+dir), pfd: -1, pwd: -1,
		done: make(chan struct{}),
	}
	w.wd.Store(-1)
	rc, err := w.file.SyscallConn()
	if err != nil {
		w.dead.Store(true)
		close(w.done)
		return w
	}
	go w.read(rc)
	return w
}

// read is the reader goroutine: it waits in the netpoller until the
// instance is readable and drains it, until close.
func (w *inotifyWatch) read(rc syscall.RawConn) {
	defer close(w.done)
	rc.Read(func(fd uintptr) bool {
		w.readMu.Lock()
		defer w.readMu.Unlock()
		for {
			n, err := unix.Read(int(fd), w.buf[:])
			if n > 0 || err == unix.EINTR {
				w.handle(w.buf[:max(n, 0)])
				continue
			}
			// EAGAIN: wait for readiness; anything else ends the reader.
			return err != unix.EAGAIN
		}
	})
	if !w.stop.Load() {
		// Not pollable, or broken: Notify checks synchronously from now on.
		w.dead.Store(true)
	}
}

// handle advances the epoch for a buffer of events of the directory's
// instance; it runs with readMu held.
func (w *inotifyWatch) handle(events []byte) {
	changed, lost := dirEvents(events, w.wd.Load())
	if lost {
		w.lost.Store(true)
	}
	if changed {
		// After lost: whoever sees the new epoch sees lost too.
		w.epoch.Add(1)
	}
}

func (w *inotifyWatch) changed(now bool) bool {
	if w.stat != nil {
		return w.stat.changed(now)
	}
	switch w.state {
	case unarmed:
		return w.arm()
	case absent:
		if !w.drainParent() {
			return false
		}
		return w.arm()
	}
	if w.epoch.Load() == w.seen && (now || w.dead.Load()) {
		// An event may be queued that the reader has not taken yet; under
		// readMu, an event it did take has advanced the epoch already.
		w.readMu.Lock()
		w.checks++
		if n, _ := unix.Read(w.fd, w.buf[:]); n > 0 {
			w.handle(w.buf[:n])
		}
		w.readMu.Unlock()
	}
	e := w.epoch.Load()
	if e == w.seen {
		return false
	}
	w.seen = e
	if w.lost.Load() {
		return w.arm()
	}
	return true
}

// arm watches the directory, or its parent while it does not exist. It
// reports a change: whatever happened before the watch needs a scan.
func (w *inotifyWatch) arm() bool {
	if wd := w.wd.Swap(-1); wd >= 0 {
		w.checks++
		unix.InotifyRmWatch(w.fd, uint32(wd))
	}
	w.lost.Store(false)
	w.seen = w.epoch.Load()
	if w.watchDir() {
		return true
	}
	if w.pfd < 0 {
		w.checks++
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			w.fallBack()
			return true
		}
		w.pfd = fd
	}
	if w.pwd < 0 {
		w.checks++
		w.lookups++
		wd, err := unix.InotifyAddWatch(w.pfd, w.parent, parentMask)
		if err != nil {
			w.fallBack()
			return true
		}
		w.pwd = wd
	}
	// Discard what the parent's queue holds: the second attempt covers it,
	// and anything later is queued for appeared.
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
	wd, err := unix.InotifyAddWatch(w.fd, w.dir, watchMask)
	switch {
	case err == nil:
		w.wd.Store(int32(wd))
		w.state = watching
		if w.pwd >= 0 {
			// Stop queueing /dev/shm's traffic nobody will read.
			w.checks++
			unix.InotifyRmWatch(w.pfd, uint32(w.pwd))
			w.pwd = -1
		}
		return true
	case err == unix.ENOENT:
		return false
	}
	w.fallBack()
	return true
}

// drainParent reads the parent instance until it is empty and reports
// whether an event may concern the directory: it was created or moved in,
// the queue overflowed, or the parent watch is gone.
func (w *inotifyWatch) drainParent() bool {
	maybe := false
	for {
		w.checks++
		n, _ := unix.Read(w.pfd, w.pbuf[:])
		if n <= 0 {
			return maybe
		}
		m, gone := parentEvents(w.pbuf[:n], int32(w.pwd), w.base)
		if gone {
			w.pwd = -1
		}
		maybe = maybe || m
		if len(w.pbuf)-n >= maxEventSize {
			// The whole queue fitted: it is empty now.
			return maybe
		}
	}
}

// fallBack replaces inotify with the mtime check for good.
func (w *inotifyWatch) fallBack() {
	w.stat = &statWatch{dir: w.dir}
	w.release()
}

// release stops the reader and closes both instances; it waits for the
// reader to return, so no goroutine outlives it.
func (w *inotifyWatch) release() {
	if w.closed {
		return
	}
	w.closed = true
	w.stop.Store(true)
	// Closing the file wakes the reader from the netpoller; the descriptor
	// is closed once the reader's callback, if running, has returned.
	w.file.Close()
	<-w.done
	if w.pfd >= 0 {
		unix.Close(w.pfd)
		w.pfd, w.pwd = -1, -1
	}
}

func (w *inotifyWatch) close() { w.release() }

// maxEventSize is the largest inotify event: a read leaving this much of
// its buffer unused returned the whole queue.
const maxEventSize = unix.SizeofInotifyEvent + unix.NAME_MAX + 1

// inotifyEvent is one event of a read buffer; name aliases the buffer.
type inotifyEvent struct {
	wd   int32
	mask uint32
	name []byte
}

// inotifyEvents yields the whole events of a read buffer; it stops at a
// truncated one.
func inotifyEvents(buf []byte) func(yield func(inotifyEvent) bool) {
	return func(yield func(inotifyEvent) bool) {
		for len(buf) >= unix.SizeofInotifyEvent {
			size := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[12:16]))
			if size > len(buf) || size < unix.SizeofInotifyEvent {
				return
			}
			name := buf[unix.SizeofInotifyEvent:size]
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1] // NUL padding
			}
			ev := inotifyEvent{
				wd:   int32(binary.NativeEndian.Uint32(buf[0:4])),
				mask: binary.NativeEndian.Uint32(buf[4:8]),
				name: name,
			}
			if !yield(ev) {
				return
			}
			buf = buf[size:]
		}
	}
}

// dirEvents reports what a buffer of events says about the directory's
// watch wd: whether the directory changed, and whether the watch is lost
// (the directory was removed or renamed, or events were dropped). Events of
// an earlier watch are stale: a scan followed it.
func dirEvents(events []byte, wd int32) (changed, lost bool) {
	for ev := range inotifyEvents(events) {
		switch {
		case ev.mask&unix.IN_Q_OVERFLOW != 0:
			changed, lost = true, true
		case ev.wd == wd:
			changed = true
			lost = lost || ev.mask&lostMask != 0
		}
	}
	return changed, lost
}

// parentEvents reports whether a buffer of events of the parent's watch pwd
// may announce the directory base (created or moved in, or events were
// dropped), and whether that watch is gone.
func parentEvents(events []byte, pwd int32, base string) (maybe, gone bool) {
	for ev := range inotifyEvents(events) {
		switch {
		case ev.mask&unix.IN_Q_OVERFLOW != 0:
			maybe = true
		case ev.wd != pwd:
		case ev.mask&unix.IN_IGNORED != 0:
			maybe, gone = true, true
		case string(ev.name) == base:
			maybe = true
		}
	}
	return maybe, gone
}
