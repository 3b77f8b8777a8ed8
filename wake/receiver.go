//go:build linux

package wake

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// Receiver owns one wakeup FIFO of a stage and counts the wakeups written to
// it. The count, its generation, only grows; a caller notes it before a get
// that misses and then waits for it to change. Safe for concurrent use.
//
// A waiting goroutine blocks its thread in poll(2) on the FIFO, so a wakeup
// reaches it straight from the kernel, as a blocking socket read would; each
// concurrent waiter holds one OS thread.
type Receiver struct {
	// Whoever drains the FIFO counts the bytes. Each waiter also polls a
	// private signal, raised when another goroutine's drain passed the
	// waiter's generation (it took the byte that would have woken it), when
	// the waiter's context is done, or on Close.

	dir, path string
	rfd       int // read end, non-blocking; waiters poll it
	wfd       int // our own write end: the FIFO never reports EOF (SPEC §8)

	mu      sync.Mutex
	gen     uint64
	closed  bool
	waiters []*waiter // between their first check and their return
	spare   []signal  // signals of waiters gone, for reuse
	idle    sync.Cond // on mu: the last waiter left a closed Receiver
}

// waiter is one goroutine in Wait; its fields are guarded by Receiver.mu.
type waiter struct {
	gen    uint64 // returns once the generation exceeds gen
	sig    signal
	hasSig bool // false if no signal could be made: poll with a short timeout
	raised bool
}

// noSignalPoll bounds a signal-less waiter's sleep: without a signal only
// the FIFO wakes it, and another goroutine may drain the FIFO first.
const noSignalPoll = 10 * time.Millisecond

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
	// Publish the FIFO under its stage name only now that it has a reader.
	final := filepath.Join(dir, scope.FIFOName(stage, id))
	if err := unix.Rename(tmp, final); err != nil {
		r.Close()
		return nil, fmt.Errorf("wake: publish fifo %s: %w", final, err)
	}
	r.path = final
	return r, nil
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
	r := &Receiver{dir: dir, path: path, rfd: rfd, wfd: wfd}
	r.idle.L = &r.mu
	return r, nil
}

// drainLocked reads, without blocking, every wakeup already in the FIFO and
// raises the signal of every waiter but self whose generation it passed.
func (r *Receiver) drainLocked(self *waiter) {
	if r.closed {
		return
	}
	before := r.gen
	var buf [512]byte
	for {
		n, err := unix.Read(r.rfd, buf[:])
		if n > 0 {
			r.gen += uint64(n)
		}
		if err != nil || n < len(buf) {
			break
		}
	}
	if r.gen == before {
		return
	}
	for _, w := range r.waiters {
		if w != self && w.gen < r.gen {
			r.raiseLocked(w)
		}
	}
}

func (r *Receiver) raiseLocked(w *waiter) {
	if w.hasSig && !w.raised {
		w.raised = true
		w.sig.raise()
	}
}

// Generation drains the FIFO without blocking and returns the number of
// wakeups seen so far.
func (r *Receiver) Generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainLocked(nil)
	return r.gen
}

// WaitForChange blocks until the generation exceeds gen or timeout passes,
// and returns the generation and whether it exceeds gen. It returns at once,
// unchanged, on a closed Receiver.
func (r *Receiver) WaitForChange(gen uint64, timeout time.Duration) (uint64, bool) {
	var deadline time.Time
	if timeout < 100*365*24*time.Hour { // longer: no deadline, not an overflow
		deadline = time.Now().Add(timeout)
	}
	now, err := r.wait(nil, gen, deadline)
	return now, err == nil
}

// Wait blocks until the generation exceeds gen and returns it, or returns
// the generation and ctx's error when ctx is done, or ErrClosed once the
// Receiver is closed.
func (r *Receiver) Wait(ctx context.Context, gen uint64) (uint64, error) {
	deadline, _ := ctx.Deadline()
	return r.wait(ctx, gen, deadline)
}

// wait is Wait with an optional ctx (nil: none) and deadline (zero: none);
// past the deadline it returns context.DeadlineExceeded.
func (r *Receiver) wait(ctx context.Context, gen uint64, deadline time.Time) (uint64, error) {
	r.mu.Lock()
	r.drainLocked(nil)
	if now, done, err := r.doneLocked(ctx, gen, deadline); done {
		r.mu.Unlock()
		return now, err
	}
	w := r.enterLocked(gen)
	r.mu.Unlock()
	if ctx != nil && ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() {
			r.mu.Lock()
			if slices.Contains(r.waiters, w) {
				r.raiseLocked(w)
			}
			r.mu.Unlock()
		})
		defer stop()
	}
	fds := []unix.PollFd{{Fd: int32(r.rfd), Events: unix.POLLIN}, {Fd: -1}}
	if w.hasSig {
		fds[1] = unix.PollFd{Fd: int32(w.sig.pollFD()), Events: unix.POLLIN}
	}
	for {
		timeout := pollTimeout(deadline, time.Now())
		if !w.hasSig && (timeout < 0 || timeout > int(noSignalPoll/time.Millisecond)) {
			timeout = int(noSignalPoll / time.Millisecond)
		}
		// EINTR and timeouts need nothing more: the checks below decide.
		unix.Poll(fds, timeout)
		r.mu.Lock()
		r.drainLocked(w)
		if now, done, err := r.doneLocked(ctx, gen, deadline); done {
			r.leaveLocked(w)
			r.mu.Unlock()
			return now, err
		}
		if w.raised && fds[1].Revents&unix.POLLIN != 0 {
			// Raises only announce an end, but never spin on a stale one.
			w.sig.clear()
			w.raised = false
		}
		r.mu.Unlock()
	}
}

// doneLocked reports whether a wait for gen is over, and with what.
func (r *Receiver) doneLocked(ctx context.Context, gen uint64, deadline time.Time) (uint64, bool, error) {
	switch {
	case r.gen > gen:
		return r.gen, true, nil
	case r.closed:
		return r.gen, true, ErrClosed
	}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return r.gen, true, err
		}
	}
	// A ctx reports its deadline only once its timer has run: do not poll
	// again in the meantime.
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return r.gen, true, context.DeadlineExceeded
	}
	return r.gen, false, nil
}

// pollTimeout is poll(2)'s timeout in milliseconds until deadline, rounded
// up so that poll does not return just before it; -1 without a deadline.
func pollTimeout(deadline, now time.Time) int {
	if deadline.IsZero() {
		return -1
	}
	d := deadline.Sub(now)
	if d <= 0 {
		return 0
	}
	return int(min((d+time.Millisecond-1)/time.Millisecond, math.MaxInt32))
}

// enterLocked registers a waiter for gen with a signal, reusing one if it
// can.
func (r *Receiver) enterLocked(gen uint64) *waiter {
	w := &waiter{gen: gen}
	if n := len(r.spare); n > 0 {
		w.sig, w.hasSig = r.spare[n-1], true
		r.spare = r.spare[:n-1]
	} else if sig, err := newSignal(); err == nil {
		w.sig, w.hasSig = sig, true
	}
	r.waiters = append(r.waiters, w)
	return w
}

// leaveLocked unregisters w: nobody raises its signal after this, so once
// cleared it may serve another waiter.
func (r *Receiver) leaveLocked(w *waiter) {
	i := slices.Index(r.waiters, w)
	r.waiters = slices.Delete(r.waiters, i, i+1)
	if w.hasSig {
		if w.raised {
			w.sig.clear()
		}
		r.spare = append(r.spare, w.sig)
	}
	if r.closed && len(r.waiters) == 0 {
		r.idle.Broadcast()
	}
}

// Close closes the FIFO's descriptors, unlinks it and removes the wake
// directory if it is empty. Waiters return ErrClosed; Close waits for them to
// leave poll before it closes the descriptors they poll, which could
// otherwise be reused for another file under them. Close is idempotent.
func (r *Receiver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for _, w := range r.waiters {
		r.raiseLocked(w)
	}
	// Also wakes waiters without a signal; never counted: drains stop now.
	unix.Write(r.wfd, zeroByte)
	for len(r.waiters) > 0 {
		r.idle.Wait()
	}
	spare := r.spare
	r.spare = nil
	r.mu.Unlock()

	for _, sig := range spare {
		sig.close()
	}
	err := unix.Close(r.rfd)
	if e := unix.Close(r.wfd); err == nil && e != nil {
		err = e
	}
	if e := unix.Unlink(r.path); e != nil && e != unix.ENOENT && err == nil {
		err = e
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
