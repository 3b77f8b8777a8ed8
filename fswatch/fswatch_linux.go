package fswatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrStopped is wrapped by Err when the background reader ended by itself:
// from then on nothing moves the epochs but Sync.
var ErrStopped = errors.New("fswatch: background reader stopped")

// lostMask marks events after which a watch no longer follows its path.
const lostMask = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_IGNORED

// maxEventSize is the largest inotify event: a read that leaves this much of
// its buffer unused returned the whole queue.
const maxEventSize = unix.SizeofInotifyEvent + unix.NAME_MAX + 1

// Watcher is one inotify instance and its watches. Its methods are safe for
// concurrent use.
type Watcher struct {
	fd   int             // the instance, non-blocking
	file *os.File        // fd, as the background reader polls it; nil if passive
	rc   syscall.RawConn // file's, for reads and watch changes that race Close

	// readMu covers one read of the instance and the epoch advances it
	// causes, so a Sync that takes it knows that every event read before
	// has been applied.
	readMu   sync.Mutex
	buf      [8 << 10]byte
	n        int // result of the last syncRead
	syncRead func(fd uintptr)
	closed   bool // passive only: fd is closed (under readMu)

	mu      sync.Mutex // watches
	watches map[int32]*Watch

	seq       atomic.Uint64 // source of epochs: unique across this Watcher's watches
	overflows atomic.Uint64
	c         chan struct{}

	stop      atomic.Bool // Close asked the reader to stop
	err       atomic.Pointer[error]
	done      chan struct{} // closed when the reader returns (or at once if passive)
	closeOnce sync.Once
	closeErr  error
}

// Watch is one watched path. Its epoch moves on every event about it, so a
// caller notes Epoch and later compares.
type Watch struct {
	w     *Watcher
	wd    int32
	entry string            // "": every event of wd counts; else only those naming entry
	seen  func(name []byte) // AddNamed's: called with each event's name
	epoch atomic.Uint64
	lost  atomic.Bool
	gone  bool // under w.mu: the kernel dropped the watch, or Remove did
}

// New returns a Watcher on a new inotify instance. With background set, a
// goroutine parked in the runtime poller applies events as they arrive;
// otherwise only Sync reads them (and the instance is not registered with
// the poller at all, so nothing in the process wakes for its events). The
// caller must Close the Watcher.
func New(background bool) (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fswatch: inotify_init1: %w", err)
	}
	w := &Watcher{fd: fd, watches: map[int32]*Watch{}, c: make(chan struct{}, 1), done: make(chan struct{})}
	w.syncRead = func(fd uintptr) { w.n = readEvents(int(fd), w.buf[:]) }
	if !background {
		close(w.done)
		return w, nil
	}
	w.file = os.NewFile(uintptr(fd), "inotify")
	if w.rc, err = w.file.SyscallConn(); err != nil {
		w.file.Close()
		return nil, fmt.Errorf("fswatch: inotify: %w", err)
	}
	go w.read()
	return w, nil
}

// readEvents makes one non-blocking read; the bytes read, 0 on EAGAIN or an
// error.
func readEvents(fd int, buf []byte) int {
	for {
		n, err := unix.Read(fd, buf)
		if err != unix.EINTR {
			return max(n, 0)
		}
	}
}

// read is the background reader: it waits in the runtime poller until the
// instance is readable and applies what it reads, until Close.
func (w *Watcher) read() {
	defer close(w.done)
	err := w.rc.Read(func(fd uintptr) bool {
		w.readMu.Lock()
		defer w.readMu.Unlock()
		for {
			n, err := unix.Read(int(fd), w.buf[:])
			if n > 0 || err == unix.EINTR {
				w.apply(w.buf[:max(n, 0)])
				continue
			}
			if err == nil {
				err = errors.New("end of file")
			}
			if err != unix.EAGAIN {
				w.setErr(fmt.Errorf("%w: read: %v", ErrStopped, err))
				return true
			}
			return false // wait for readiness
		}
	})
	if w.stop.Load() {
		return
	}
	if err != nil { // not pollable, or the poller failed
		w.setErr(fmt.Errorf("%w: %v", ErrStopped, err))
	}
	// Nothing follows the paths any more: tell every watch's owner.
	w.mu.Lock()
	for _, x := range w.watches {
		w.lose(x)
	}
	w.mu.Unlock()
	w.notify()
}

func (w *Watcher) setErr(err error) { w.err.CompareAndSwap(nil, &err) }

// Err is nil while the Watcher works as asked; it wraps ErrStopped once the
// background reader ended by itself (the instance is not pollable, or a read
// failed), and is os.ErrClosed after Close.
func (w *Watcher) Err() error {
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Background reports whether a background reader is applying events as
// they arrive. When it is not (passive, stopped or closed), epochs move only
// in Sync.
func (w *Watcher) Background() bool { return w.file != nil && w.err.Load() == nil }

// C receives a value, coalesced, after events moved some epoch: a caller
// can select on it instead of polling epochs. Only one receiver is woken per
// batch of events.
func (w *Watcher) C() <-chan struct{} { return w.c }

// Overflows counts the times the kernel dropped events of this instance
// (IN_Q_OVERFLOW). Every watch is then marked lost: its own loss may have
// been among the events dropped.
func (w *Watcher) Overflows() uint64 { return w.overflows.Load() }

func (w *Watcher) notify() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// apply moves the epochs of the watches a buffer of events concerns;
// readMu is held.
func (w *Watcher) apply(buf []byte) {
	changed := false
	w.mu.Lock()
	for ev := range events(buf) {
		if ev.mask&unix.IN_Q_OVERFLOW != 0 {
			w.overflows.Add(1)
			for _, x := range w.watches {
				x.lost.Store(true)
				x.epoch.Store(w.seq.Add(1))
			}
			changed = true
			continue
		}
		x := w.watches[ev.wd]
		if x == nil {
			continue // a removed watch's: its owner scanned after removing it
		}
		lost := ev.mask&lostMask != 0
		if !lost && x.entry != "" && string(ev.name) != x.entry {
			continue
		}
		if x.seen != nil && !lost && len(ev.name) > 0 {
			x.seen(ev.name)
		}
		if ev.mask&unix.IN_IGNORED != 0 { // the kernel freed wd
			x.gone = true
			delete(w.watches, ev.wd)
		}
		if lost {
			// Before the epoch: whoever sees the new epoch sees lost too.
			x.lost.Store(true)
		}
		x.epoch.Store(w.seq.Add(1))
		changed = true
	}
	w.mu.Unlock()
	if changed {
		w.notify()
	}
}

// lose marks x lost and moves its epoch; w.mu is held.
func (w *Watcher) lose(x *Watch) {
	x.lost.Store(true)
	x.epoch.Store(w.seq.Add(1))
}

// Sync reads, with one non-blocking read, the events queued now and applies
// them, so a change made before the call has moved its watch's epoch when
// Sync returns, whether or not the background reader got to it. more
// reports that the read filled the buffer: the queue may hold more events.
// It makes one system call.
func (w *Watcher) Sync() (more bool) {
	w.readMu.Lock()
	defer w.readMu.Unlock()
	w.n = 0
	if w.file != nil {
		if w.rc.Control(w.syncRead) != nil {
			return false // closed
		}
	} else if !w.closed {
		w.syncRead(uintptr(w.fd))
	}
	if w.n == 0 {
		return false
	}
	w.apply(w.buf[:w.n])
	return len(w.buf)-w.n < maxEventSize
}

// withFD runs f on the instance unless the Watcher is closed.
func (w *Watcher) withFD(f func(fd int) error) error {
	if w.file != nil {
		var err error
		if cerr := w.rc.Control(func(fd uintptr) { err = f(int(fd)) }); cerr != nil {
			return cerr
		}
		return err
	}
	w.readMu.Lock()
	defer w.readMu.Unlock()
	if w.closed {
		return os.ErrClosed
	}
	return f(w.fd)
}

// Add watches path for the events in mask (unix.IN_*). Path itself going
// away (IN_DELETE_SELF, IN_MOVE_SELF, IN_IGNORED) is always watched for and
// marks the watch lost. The error wraps the inotify_add_watch
// error (unix.ENOENT for a missing path).
func (w *Watcher) Add(path string, mask uint32) (*Watch, error) { return w.add(path, "", mask, nil) }

// AddEntry watches directory dir for the events in mask that name entry
// (its creation or arrival, say), ignoring the others: for a busy directory
// such as /dev/shm whose traffic is mostly someone else's.
func (w *Watcher) AddEntry(dir, entry string, mask uint32) (*Watch, error) {
	return w.add(dir, entry, mask, nil)
}

// AddNamed watches directory dir for the events in mask and calls seen with
// the name of the entry each one is about, for an owner that must know
// which entries changed (the lock files closed in /dev/shm, say) and cannot
// afford a rescan per event. seen runs on the goroutine that applies events
// (the background reader, or a caller of Sync), before the watch's epoch
// moves and C is notified; name aliases the read buffer and is valid only
// during the call. seen must be quick and must not call the Watcher or its
// watches. Events the kernel dropped are not seen: after an overflow the
// watch is Lost, and its owner rescans.
func (w *Watcher) AddNamed(dir string, mask uint32, seen func(name []byte)) (*Watch, error) {
	return w.add(dir, "", mask, seen)
}

func (w *Watcher) add(path, entry string, mask uint32, seen func([]byte)) (*Watch, error) {
	var wd int
	err := w.withFD(func(fd int) (err error) {
		wd, err = unix.InotifyAddWatch(fd, path, mask|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fswatch: watch %s: %w", path, err)
	}
	x := &Watch{w: w, wd: int32(wd), entry: entry, seen: seen}
	x.epoch.Store(w.seq.Add(1))
	w.mu.Lock()
	if old := w.watches[x.wd]; old != nil {
		// The inode was watched already: the kernel returned its wd, with
		// the new mask. The old Watch stops following it.
		old.gone = true
		w.lose(old)
	}
	w.watches[x.wd] = x
	w.mu.Unlock()
	return x, nil
}

// Epoch moves on every event about the watch, on its loss and on every
// queue overflow. Epochs are unique across the watches of a Watcher, so a
// watch that replaces another never repeats one of its epochs.
func (x *Watch) Epoch() uint64 { return x.epoch.Load() }

// Lost reports that the watch may no longer follow its path: the path was
// deleted or moved, the kernel dropped the watch, events were dropped by an
// overflow, the background reader stopped, or Remove was called. Its owner
// removes it, adds a new one and rescans.
func (x *Watch) Lost() bool { return x.lost.Load() }

// Remove stops the watch. It makes no system call when the kernel already
// dropped it.
func (x *Watch) Remove() error {
	w := x.w
	w.mu.Lock()
	gone := x.gone
	x.gone = true
	if w.watches[x.wd] == x {
		delete(w.watches, x.wd)
	}
	x.lost.Store(true)
	w.mu.Unlock()
	if gone {
		return nil
	}
	err := w.withFD(func(fd int) error {
		_, err := unix.InotifyRmWatch(fd, uint32(x.wd))
		return ignoreEINVAL(err)
	})
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("fswatch: remove watch %d: %w", x.wd, err)
	}
	return nil
}

// ignoreEINVAL: the kernel dropped the watch between our check and the call.
func ignoreEINVAL(err error) error {
	if err == unix.EINVAL {
		return nil
	}
	return err
}

// Close stops the background reader, waiting for it to return, and closes
// the instance. It is idempotent and returns what closing met.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		w.stop.Store(true)
		closed := error(os.ErrClosed)
		w.err.Store(&closed)
		if w.file != nil {
			// Closing the file wakes the reader from the poller; the
			// descriptor is closed once its callback, if running, returned.
			w.closeErr = w.file.Close()
		} else {
			w.readMu.Lock()
			w.closed = true
			w.closeErr = unix.Close(w.fd)
			w.readMu.Unlock()
		}
		<-w.done
		w.mu.Lock()
		for _, x := range w.watches {
			x.gone = true
			w.lose(x)
		}
		clear(w.watches)
		w.mu.Unlock()
		if w.closeErr != nil {
			w.closeErr = fmt.Errorf("fswatch: close: %w", w.closeErr)
		}
	})
	return w.closeErr
}

// event is one inotify event of a read buffer; name aliases the buffer.
type event struct {
	wd   int32
	mask uint32
	name []byte
}

// events yields the whole events of a read buffer, their names without the
// NUL padding; it stops at a truncated one. This is the one inotify parser.
func events(buf []byte) func(yield func(event) bool) {
	return func(yield func(event) bool) {
		for len(buf) >= unix.SizeofInotifyEvent {
			size := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[12:16]))
			if size > len(buf) || size < unix.SizeofInotifyEvent {
				return
			}
			name := buf[unix.SizeofInotifyEvent:size]
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			ev := event{
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
