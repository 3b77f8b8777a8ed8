package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// watcher keeps discovery and producer liveness off the poll path
// (SPEC §3 "a miss must be cheap", §7): one goroutine blocks in epoll on an
// inotify fd watching the ring directory and on the readers' pidfds. It
// only sets atomics: gen moves on any registry change, a reader's dead flag
// when its producer exits. Get compares them without a system call.
type watcher struct {
	epfd, inofd, wakefd int
	log                 *slog.Logger

	watching atomic.Bool   // the ring directory is watched: gen is meaningful
	gen      atomic.Uint64 // bumped on every event in the ring directory

	mu      sync.Mutex
	wd      int // current watch descriptor, -1 if none
	readers map[uint64]*reader
	nextID  uint64
	done    chan struct{}
}

// Epoll user data: 0 wakes the loop to stop, 1 is inotify, others readers.
const (
	watchIDWake    = 0
	watchIDInotify = 1
)

// watcherEnabled is switched off by tests of the stat fallback.
var watcherEnabled = true

// drainGate, when set, holds the loop back before it reads directory
// events, as a busy machine would (tests of Refresh).
var drainGate atomic.Pointer[chan struct{}]

func newWatcher(log *slog.Logger) (*watcher, error) {
	if !watcherEnabled {
		return nil, errors.New("ring: watcher disabled")
	}
	w := &watcher{epfd: -1, inofd: -1, wakefd: -1, wd: -1, log: log,
		readers: map[uint64]*reader{}, nextID: 2, done: make(chan struct{})}
	var err error
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("ring: epoll: %w", err)
	}
	if w.inofd, err = unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC); err != nil {
		w.closeFDs()
		return nil, fmt.Errorf("ring: inotify: %w", err)
	}
	if w.wakefd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		w.closeFDs()
		return nil, fmt.Errorf("ring: eventfd: %w", err)
	}
	for id, fd := range map[uint64]int{watchIDWake: w.wakefd, watchIDInotify: w.inofd} {
		if err := w.ctl(unix.EPOLL_CTL_ADD, fd, id); err != nil {
			w.closeFDs()
			return nil, fmt.Errorf("ring: epoll add: %w", err)
		}
	}
	go w.run()
	return w, nil
}

func (w *watcher) ctl(op, fd int, id uint64) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	return unix.EpollCtl(w.epfd, op, fd, &ev)
}

// watchDir watches the ring directory once it exists. Markers made before
// the watch was set are found because gen moves: the next Get rediscovers.
func (w *watcher) watchDir(path string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, err := unix.InotifyAddWatch(w.inofd, path, unix.IN_CREATE|unix.IN_DELETE|unix.IN_ATTRIB|
		unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_ONLYDIR)
	if err != nil {
		return fmt.Errorf("ring: watch %s: %w", path, err)
	}
	w.wd = wd
	w.gen.Add(1)
	w.watching.Store(true)
	return nil
}

// addReader has the loop watch r's pidfd; without one nothing is watched
// and liveness is checked by start time on the slow path.
func (w *watcher) addReader(r *reader) {
	if r.pidfd < 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.nextID
	w.nextID++
	if err := w.ctl(unix.EPOLL_CTL_ADD, r.pidfd, id); err != nil {
		w.log.Debug("host ring: cannot watch producer", "ring", r.name, "err", err)
		return
	}
	r.watchID = id
	w.readers[id] = r
}

// removeReader stops watching r's pidfd; called before it is closed.
func (w *watcher) removeReader(r *reader) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.watchID == 0 {
		return
	}
	delete(w.readers, r.watchID)
	unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, r.pidfd, nil)
	r.watchID = 0
}

func (w *watcher) run() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 16)
	buf := make([]byte, 16<<10)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// Fall back to the stat stamp for good.
			w.log.Warn("host ring: watcher stopped; discovery falls back to directory stamps", "err", err)
			w.watching.Store(false)
			return
		}
		for _, ev := range events[:n] {
			switch id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32; id {
			case watchIDWake:
				return
			case watchIDInotify:
				if g := drainGate.Load(); g != nil {
					<-*g
				}
				w.drainInotify(buf)
			default:
				w.mu.Lock()
				if r, ok := w.readers[id]; ok {
					delete(w.readers, id)
					unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, r.pidfd, nil)
					r.watchID = 0
					r.dead.Store(true)
				}
				w.mu.Unlock()
			}
		}
	}
}

func (w *watcher) drainInotify(buf []byte) {
	for {
		n, err := unix.Read(w.inofd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			if mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 && int(wd) == w.wd {
				// The directory went away: until it is watched again, Get
				// compares stamps (and finds it absent).
				if mask&unix.IN_IGNORED == 0 {
					unix.InotifyRmWatch(w.inofd, uint32(wd))
				}
				w.wd = -1
				w.watching.Store(false)
			}
			off += unix.SizeofInotifyEvent + nameLen
		}
		w.gen.Add(1)
		w.mu.Unlock()
	}
}

// sync reads, now, the directory events the loop has not read yet, so a
// registry change that happened before the caller's hint (a wakeup) moves
// gen before the caller's next Get. The loop may read them concurrently:
// every event is read once, and either reader bumps gen.
func (w *watcher) sync() {
	var buf [4096]byte
	w.drainInotify(buf[:])
}

func (w *watcher) close() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(w.wakefd, one[:])
	<-w.done
	w.watching.Store(false)
	w.closeFDs()
}

func (w *watcher) closeFDs() {
	for _, fd := range []int{w.epfd, w.inofd, w.wakefd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
