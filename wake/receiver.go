package wake

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// Receiver owns one wakeup FIFO of a stage and counts the wakeups written to
// it. The count, its generation, only grows; a caller notes it before a get
// that misses and then waits for it to change. Safe for concurrent use.
type Receiver struct {
	dir, path string
	file      *os.File // read end, waited on through the runtime poller
	rfd       int      // file's descriptor, for Generation's non-blocking drain
	wfd       int      // our own write end: the FIFO never reports EOF (SPEC §8)
	drained   chan struct{}

	mu      sync.Mutex
	gen     uint64
	changed chan struct{} // closed (and replaced) when gen advances or on Close
	closed  bool
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
	id, err := uuid4Hex()
	if err != nil {
		return nil, fmt.Errorf("wake: fifo name: %w", err)
	}
	tmp := filepath.Join(dir, tempFIFOName(id))
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
	go r.drain()
	// Publish the FIFO under its stage name only now that it has a reader.
	final := filepath.Join(dir, fifoName(stage, id))
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
	// A non-blocking descriptor is registered with the runtime poller, so
	// the drainer waits in epoll without holding a thread.
	return &Receiver{
		dir:     dir,
		path:    path,
		file:    os.NewFile(uintptr(rfd), path),
		rfd:     rfd,
		wfd:     wfd,
		drained: make(chan struct{}),
		changed: make(chan struct{}),
	}, nil
}

// drain counts wakeups as they arrive until the read end is closed.
func (r *Receiver) drain() {
	defer close(r.drained)
	var buf [512]byte
	for {
		n, err := r.file.Read(buf[:])
		if n > 0 {
			r.mu.Lock()
			r.advanceLocked(uint64(n))
			r.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (r *Receiver) advanceLocked(n uint64) {
	r.gen += n
	if !r.closed {
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// drainLocked reads, without blocking, every wakeup already in the FIFO.
func (r *Receiver) drainLocked() {
	if r.closed {
		return
	}
	var buf [512]byte
	for {
		n, err := unix.Read(r.rfd, buf[:])
		if n > 0 {
			r.advanceLocked(uint64(n))
		}
		if err != nil || n < len(buf) {
			return
		}
	}
}

// Generation drains the FIFO without blocking and returns the number of
// wakeups seen so far.
func (r *Receiver) Generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainLocked()
	return r.gen
}

// WaitForChange blocks until the generation exceeds gen or timeout passes,
// and returns the generation and whether it exceeds gen. It returns at once,
// unchanged, on a closed Receiver.
func (r *Receiver) WaitForChange(gen uint64, timeout time.Duration) (uint64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	now, err := r.Wait(ctx, gen)
	return now, err == nil
}

// Wait blocks until the generation exceeds gen and returns it, or returns
// the generation and ctx's error when ctx is done, or ErrClosed once the
// Receiver is closed.
func (r *Receiver) Wait(ctx context.Context, gen uint64) (uint64, error) {
	for {
		r.mu.Lock()
		r.drainLocked()
		now, changed, closed := r.gen, r.changed, r.closed
		r.mu.Unlock()
		switch {
		case now > gen:
			return now, nil
		case closed:
			return now, ErrClosed
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return r.Generation(), ctx.Err()
		}
	}
}

// Close closes the FIFO's descriptors, unlinks it and removes the wake
// directory if it is empty. Waiters return. Close is idempotent.
func (r *Receiver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.changed)
	r.mu.Unlock()

	err := r.file.Close() // also ends the drainer's read
	<-r.drained
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
