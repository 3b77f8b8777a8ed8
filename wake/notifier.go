package wake

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// Notifier is the producer side of SPEC §8: Notify writes one zero byte to
// every FIFO of a stage. It keeps the FIFOs open between calls and rescans
// the wake directory only after it changed, so a put costs one write per
// receiver plus one change check (an inotify read, or a stat where inotify
// is unavailable). Safe for concurrent use.
type Notifier struct {
	dir     string
	enabled bool

	mu     sync.Mutex
	watch  watcher
	epoch  uint64 // advances whenever the directory may have changed
	stages map[string]*targets
	closed bool
}

// targets are the open FIFOs of one stage as of a directory epoch.
type targets struct {
	epoch   uint64
	scanned bool
	fds     []int
	// pending are FIFOs that had no reader when found; they are retried
	// until retryUntil (see retryWindow).
	pending    []string
	retryUntil time.Time
}

// watcher tells whether the wake directory may have changed since its last
// call. The first call after a watcher starts watching reports a change.
type watcher interface {
	changed() bool
	close()
}

// NewNotifier returns a Notifier for the wake directory dir, which need not
// exist yet. When wakeups are disabled (VLLM_OMNI_SHM_WAKEUP=0 at this call)
// its Notify does nothing.
func NewNotifier(dir string) *Notifier {
	n := &Notifier{dir: dir, enabled: Enabled(), stages: map[string]*targets{}}
	if n.enabled {
		n.watch = newWatcher(dir)
	}
	return n
}

var zeroByte = []byte{0}

// Notify writes one zero byte, without blocking, to every FIFO dir/{to}_* of
// a numeric stage. Errors are ignored: wakeups are hints (SPEC §8). A full
// FIFO already holds a wakeup the receiver has not drained.
func (n *Notifier) Notify(to string) {
	if !n.enabled || !scope.IsNumeric(to) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if n.watch.changed() {
		n.epoch++
	}
	t := n.stages[to]
	if t == nil {
		t = &targets{}
		n.stages[to] = t
	}
	if !t.scanned || t.epoch != n.epoch {
		n.scan(to, t)
	} else if len(t.pending) > 0 {
		t.retry()
	}
	kept := t.fds[:0]
	for _, fd := range t.fds {
		if _, err := unix.Write(fd, zeroByte); err == unix.EPIPE {
			// The reader is gone; its FIFO will be unlinked or is stale.
			unix.Close(fd)
			continue
		}
		kept = append(kept, fd)
	}
	t.fds = kept
}

// scan replaces t's FIFOs with those now in the directory.
func (n *Notifier) scan(stage string, t *targets) {
	t.closeAll()
	t.epoch, t.scanned = n.epoch, true
	dfd, err := unix.Open(n.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(dfd), n.dir)
	defer d.Close()
	var st unix.Stat_t
	// Only a private directory of ours: anything else could hold files
	// planted by another user.
	if unix.Fstat(dfd, &st) != nil || checkPrivateDir(n.dir, &st) != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		if !matchesStage(name, stage) {
			continue
		}
		fd, err := openTarget(dfd, name)
		switch {
		case err == nil:
			t.fds = append(t.fds, fd)
		case err == unix.ENXIO:
			t.pending = append(t.pending, filepath.Join(n.dir, name))
		}
	}
	if len(t.pending) > 0 {
		t.retryUntil = time.Now().Add(retryWindow)
	}
}

// openTarget opens dir/name for a non-blocking write if it is a FIFO with a
// reader; ENXIO means it has none.
func openTarget(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		unix.Close(fd)
		return -1, unix.EINVAL
	}
	return fd, nil
}

// retry reopens the pending FIFOs that have a reader by now.
func (t *targets) retry() {
	if time.Now().After(t.retryUntil) {
		t.pending = nil
		return
	}
	left := t.pending[:0]
	for _, path := range t.pending {
		fd, err := openTarget(unix.AT_FDCWD, path)
		switch {
		case err == nil:
			t.fds = append(t.fds, fd)
		case err == unix.ENXIO:
			left = append(left, path)
		}
	}
	t.pending = left
}

func (t *targets) closeAll() {
	for _, fd := range t.fds {
		unix.Close(fd)
	}
	t.fds, t.pending = t.fds[:0], nil
}

// Close releases the Notifier's descriptors; later Notify calls do nothing.
// Close is idempotent.
func (n *Notifier) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	for _, t := range n.stages {
		t.closeAll()
	}
	n.stages = nil
	if n.watch != nil {
		n.watch.close()
	}
	return nil
}

// statWatch detects changes by the directory's identity and mtime: the
// fallback where inotify is unavailable.
type statWatch struct {
	dir     string
	last    dirStamp
	recheck bool // the last stamp was racy: rescan even if it is unchanged
}

func (w *statWatch) changed() bool {
	var st unix.Stat_t
	if err := unix.Stat(w.dir, &st); err != nil {
		w.last = dirStamp{}
		return true
	}
	s := dirStamp{dev: uint64(st.Dev), ino: uint64(st.Ino), mtime: st.Mtim.Nano()}
	c := s != w.last || w.recheck
	w.last, w.recheck = s, racy(s.mtime, time.Now())
	return c
}

func (w *statWatch) close() {}
