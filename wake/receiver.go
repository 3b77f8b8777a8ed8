//go:build linux

package wake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// Receiver owns one wakeup FIFO of a stage and counts the wakeups written to
// it. The count, its generation, only grows; a caller notes it before a get
// that misses and then waits for it to change. Safe for concurrent use.
//
// The FIFO is read through Go's runtime poller: once anything waits (Wait,
// WaitForChange or C), one goroutine, parked in the poller, drains and
// counts the wakeups as they arrive. Waiters park on a channel, so however
// many goroutines wait, the Receiver holds no OS thread and makes no
// system call until a wakeup arrives.
type Receiver struct {
	dir, path string
	file      *os.File        // the read end, non-blocking, in the runtime poller
	rc        syscall.RawConn // file's
	wfd       int             // our own write end: the FIFO never reports EOF (SPEC §8)
	drainFD   func(fd uintptr)
	sleep     *sleepers // the FIFO's sleepers count; nil: producers always write

	mu       sync.Mutex
	gen      uint64
	closed   bool
	counting bool          // CountSleeps was called: the base count of one is gone
	changed  chan struct{} // closed (and replaced) when gen moves, and at Close
	waiting  int           // goroutines in Wait, for tests
	c        chan struct{} // C's: coalesced
	reading  bool          // the background reader was started
	readEnd  chan struct{} // closed when it returns

	interrupted atomic.Bool // Interrupt was called since Await last looked
	awaiting    bool        // in Await (under mu)
	awaited     uint64      // gen when Await last returned (under mu)
}

// OpenReceiver creates the wake directory dir if needed (mode 0700) and a
// FIFO dir/{stage}_{uuid4 hex} (mode 0600) for a numeric stage, and opens it.
// It returns ErrDisabled when wakeups are disabled, ErrStage for a
// non-numeric stage and ErrUnsafeDir when dir is not a private directory of
// this user. The caller must Close the Receiver to remove its FIFO.
func OpenReceiver(dir, stage string) (*Receiver, error) {
	if !Enabled() {
		return nil, ErrDisabled
	}
	if !scope.IsNumeric(stage) {
		return nil, fmt.Errorf("%w: %q", ErrStage, stage)
	}
	id, err := scope.NewID()
	if err != nil {
		return nil, fmt.Errorf("wake: fifo name: %w", err)
	}
	tmp := filepath.Join(dir, scope.TempFIFOName(id))
	// Another receiver's Close may remove the empty directory between our
	// mkdir and mkfifo: retry a few times.
	for try := 0; ; try++ {
		if err = privateDir(dir); err != nil {
			return nil, err
		}
		err = unix.Mkfifo(tmp, fifoMode)
		if err != unix.ENOENT || try == 3 {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("wake: mkfifo %s: %w", tmp, err)
	}
	r, err := openFIFO(dir, tmp)
	if err != nil {
		unix.Unlink(tmp)
		return nil, err
	}
	// The sleepers file comes before the FIFO's stage name, so a producer
	// that finds the FIFO finds the file. Its count starts at one, which
	// only CountSleeps takes back: until a user of the Receiver announces
	// its sleeps, producers write every wakeup. Without the file (it could
	// not be made) they always do.
	fifoName := scope.FIFOName(stage, id)
	if s, err := createSleepers(dir, fifoName); err == nil {
		s.count().Store(1)
		r.sleep = s
	}
	// Publish the FIFO under its stage name only now that it has a reader.
	final := filepath.Join(dir, fifoName)
	if err := unix.Rename(tmp, final); err != nil {
		r.Close()
		removeSleepers(dir, fifoName)
		return nil, fmt.Errorf("wake: publish fifo %s: %w", final, err)
	}
	r.path = final
	return r, nil
}

// CountSleeps tells producers that skip wakeups for awake receivers
// (Notifier.NotifyRing) that the caller, from now on, announces every sleep
// on this Receiver with BeginSleep and EndSleep: while no sleep is
// announced, such producers write it no wakeup. The caller must be the
// Receiver's only waiter. Idempotent.
func (r *Receiver) CountSleeps() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counting || r.closed || r.sleep == nil {
		return
	}
	r.counting = true
	r.sleep.count().Add(^uint32(0))
}

// BeginSleep announces that the caller is about to sleep on the Receiver:
// producers write wakeups again until EndSleep. The caller then checks
// once more for what it waits for, and sleeps only if that check finds
// nothing (see sleepers). No system call: an atomic add in shared memory.
func (r *Receiver) BeginSleep() { r.addSleeper(1) }

// EndSleep takes back one BeginSleep, after the caller woke (or decided
// not to sleep).
func (r *Receiver) EndSleep() { r.addSleeper(^uint32(0)) }

func (r *Receiver) addSleeper(delta uint32) {
	r.mu.Lock()
	if r.sleep != nil && !r.closed {
		r.sleep.count().Add(delta)
	}
	r.mu.Unlock()
}

// privateDir creates dir (mode 0700) unless it exists, and checks that it is
// a real directory of ours that nobody else may write to.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("wake: create %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("wake: stat %s: %w", dir, err)
	}
	return checkPrivateDir(dir, &st)
}

func checkPrivateDir(dir string, st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeDir, dir)
	case int(st.Uid) != os.Getuid():
		return fmt.Errorf("%w: %s belongs to uid %d", ErrUnsafeDir, dir, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%w: %s has mode %#o", ErrUnsafeDir, dir, st.Mode&0o777)
	}
	return nil
}

// openFIFO opens both ends of the FIFO at path.
func openFIFO(dir, path string) (*Receiver, error) {
	rfd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("wake: open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(rfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		unix.Close(rfd)
		return nil, fmt.Errorf("wake: %s is not a fifo (%v)", path, err)
	}
	wfd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(rfd)
		return nil, fmt.Errorf("wake: open %s for writing: %w", path, err)
	}
	r := &Receiver{dir: dir, path: path, wfd: wfd, changed: make(chan struct{}), c: make(chan struct{}, 1), readEnd: make(chan struct{})}
	r.drainFD = func(fd uintptr) { r.drain(int(fd)) }
	// Non-blocking, so os.NewFile registers it with the runtime poller.
	r.file = os.NewFile(uintptr(rfd), path)
	if r.rc, err = r.file.SyscallConn(); err != nil {
		r.file.Close()
		unix.Close(wfd)
		return nil, fmt.Errorf("wake: %s: %w", path, err)
	}
	return r, nil
}

// drain reads, without blocking, every wakeup already in the FIFO at fd
// and counts it; r.mu is held. A read shorter than the buffer emptied the
// FIFO, so the next write makes it readable again.
func (r *Receiver) drain(fd int) {
	before := r.gen
	var buf [512]byte
	for {
		n, err := unix.Read(fd, buf[:])
		if n > 0 {
			r.gen += uint64(n)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil || n < len(buf) {
			break
		}
	}
	if r.gen != before {
		close(r.changed)
		r.changed = make(chan struct{})
		select {
		case r.c <- struct{}{}:
		default:
		}
	}
}

// drainLocked drains the FIFO now, with one read, whatever the background
// reader does; r.mu is held. Without the background reader, a wakeup it
// counted ends an Await: the FIFO it drained no longer wakes the poller.
func (r *Receiver) drainLocked() {
	if r.closed {
		return
	}
	before := r.gen
	r.rc.Control(r.drainFD)
	if r.gen != before && r.awaiting {
		r.Interrupt()
	}
}

// longAgo is a read deadline already passed: it ends a wait in the poller.
var longAgo = time.Unix(1, 0)

// Await is C for a caller that reads the FIFO itself, so that the wakeup
// reaches it straight from the runtime poller, with no goroutine between:
// it drains and counts the wakeups already there and, if there were none,
// waits in the poller until one arrives, until deadline (zero: none) or
// until Interrupt. It reports whether the generation moved since the last
// Await returned (a Generation or Wait in between may have drained the
// FIFO: those wakeups end this Await at once), and whether Interrupt
// ended it. An Interrupt made before the call
// ends it at once; every Interrupt made before it returns is consumed by
// it. It returns ErrClosed once the
// Receiver is closed, or once C started the background reader: use Await
// or C, from one goroutine.
func (r *Receiver) Await(deadline time.Time) (woke, interrupted bool, err error) {
	r.mu.Lock()
	if r.closed || r.reading {
		r.mu.Unlock()
		return false, false, ErrClosed
	}
	start := r.awaited
	if r.gen != start {
		r.awaited = r.gen
		r.mu.Unlock()
		r.interrupted.Store(false)
		return true, false, nil
	}
	r.awaiting = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.awaiting = false
		r.awaited = r.gen
		r.mu.Unlock()
	}()
	r.file.SetReadDeadline(deadline)
	// After setting the deadline: an Interrupt before it is seen here, one
	// after it moved the deadline to the past.
	if r.interrupted.Swap(false) {
		return r.Seen() != start, true, nil
	}
	err = r.rc.Read(func(fd uintptr) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed {
			return true
		}
		r.drain(int(fd))
		return r.gen != start
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	woke = r.gen != start
	switch {
	case r.closed:
		return woke, false, ErrClosed
	case err == nil || woke:
		// What an Interrupt meant to wake us for, we return to do now.
		r.interrupted.Store(false)
		return woke, false, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false, r.interrupted.Swap(false), nil
	}
	return false, false, fmt.Errorf("wake: await %s: %w", r.path, err)
}

// Interrupt ends the current or next Await. Safe from any goroutine; no
// system call.
func (r *Receiver) Interrupt() {
	r.interrupted.Store(true)
	r.file.SetReadDeadline(longAgo)
}

// startLocked starts the background reader once; r.mu is held.
func (r *Receiver) startLocked() {
	if r.reading || r.closed {
		return
	}
	r.reading = true
	go r.read()
}

// read is the background reader: parked in the runtime poller until the
// FIFO is readable, it drains it, until Close.
func (r *Receiver) read() {
	defer close(r.readEnd)
	for {
		err := r.rc.Read(func(fd uintptr) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.closed {
				return true
			}
			r.drain(int(fd))
			return false // wait for the next wakeup
		})
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		r.file.SetReadDeadline(time.Time{}) // an Interrupt meant for Await
	}
}

// C receives a value, coalesced, after wakeups arrived: one goroutine that
// selects on it (a dispatcher) learns of every put without polling. The
// first call starts the background reader.
func (r *Receiver) C() <-chan struct{} {
	r.mu.Lock()
	r.startLocked()
	r.mu.Unlock()
	return r.c
}

// Generation drains the FIFO without blocking and returns the number of
// wakeups seen so far.
func (r *Receiver) Generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainLocked()
	return r.gen
}

// Seen is the number of wakeups counted so far, without reading the FIFO:
// those the background reader (or a Generation or Wait) has drained.
func (r *Receiver) Seen() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// WaitForChange blocks until the generation exceeds gen or timeout passes,
// and returns the generation and whether it exceeds gen. It returns at once,
// unchanged, on a closed Receiver.
func (r *Receiver) WaitForChange(gen uint64, timeout time.Duration) (uint64, bool) {
	var expired <-chan time.Time
	if timeout < 100*365*24*time.Hour { // longer: no deadline, not an overflow
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	now, err := r.wait(nil, gen, expired)
	return now, err == nil
}

// Wait blocks until the generation exceeds gen and returns it, or returns
// the generation and ctx's error when ctx is done, or ErrClosed once the
// Receiver is closed.
func (r *Receiver) Wait(ctx context.Context, gen uint64) (uint64, error) {
	return r.wait(ctx, gen, nil)
}

// wait is Wait with an optional ctx (nil: none) and timer (nil: none,
// else context.DeadlineExceeded when it fires).
func (r *Receiver) wait(ctx context.Context, gen uint64, expired <-chan time.Time) (uint64, error) {
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainLocked() // what arrived before the reader runs
	r.startLocked()
	for {
		switch {
		case r.gen > gen:
			return r.gen, nil
		case r.closed:
			return r.gen, ErrClosed
		}
		if ctx != nil && ctx.Err() != nil {
			return r.gen, ctx.Err()
		}
		changed := r.changed
		r.waiting++
		r.mu.Unlock()
		var err error
		select {
		case <-changed:
		case <-done:
		case <-expired:
			err = context.DeadlineExceeded
		}
		r.mu.Lock()
		r.waiting--
		if err != nil && r.gen <= gen {
			return r.gen, err
		}
	}
}

// Close closes the FIFO's descriptors, unlinks it and removes the wake
// directory if it is empty. Waiters return ErrClosed (or the generation they
// waited for, if it came first); the background reader is stopped before
// Close returns. Close is idempotent.
func (r *Receiver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.changed)
	reading := r.reading
	r.mu.Unlock()

	// Wakes the background reader from the poller; the descriptor is
	// closed once its callback, if running, returned.
	err := r.file.Close()
	if reading {
		<-r.readEnd
	} else {
		close(r.readEnd) // none can start now
	}
	if e := unix.Close(r.wfd); err == nil && e != nil {
		err = e
	}
	if e := unix.Unlink(r.path); e != nil && e != unix.ENOENT && err == nil {
		err = e
	}
	if r.sleep != nil {
		// After the FIFO's unlink: no producer finds the FIFO without it.
		dir, name := filepath.Split(r.path)
		if e := removeSleepers(dir, name); e != nil && err == nil {
			err = e
		}
		r.sleep.close() // r.closed is set: nobody counts any more
	}
	// Another receiver may still use the directory: ENOTEMPTY is expected.
	if e := unix.Rmdir(r.dir); e != nil && e != unix.ENOTEMPTY && e != unix.EEXIST && e != unix.ENOENT && err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("wake: close %s: %w", r.path, err)
	}
	return nil
}
