package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// validPID reports whether pid can name a process at all: 0 and negative
// values mean process groups to kill(2), and pidfd_open takes an int32.
func validPID(pid int) bool { return pid > 0 && pid <= 1<<31-1 }

// StartTime returns field 22 of /proc/{pid}/stat. The error wraps
// ErrNoProcess when pid names no process.
func StartTime(pid int) (uint64, error) {
	if !validPID(pid) {
		return 0, fmt.Errorf("proc: start time of pid %d: %w", pid, ErrNoProcess)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return 0, fmt.Errorf("proc: start time of pid %d: %w", pid, ErrNoProcess)
		}
		return 0, fmt.Errorf("proc: start time of pid %d: %w", pid, err)
	}
	return ParseStartTime(stat)
}

var (
	selfOnce sync.Once
	selfID   ID
	selfErr  error
)

// Self returns this process's identity. The error is that of reading /proc;
// a process that cannot name itself must not create rings (SPEC §3).
func Self() (ID, error) {
	selfOnce.Do(func() {
		pid := os.Getpid()
		start, err := StartTime(pid)
		selfID, selfErr = ID{PID: pid, Start: start}, err
	})
	return selfID, selfErr
}

// IsSelf reports whether id names this process.
func IsSelf(id ID) bool {
	s, err := Self()
	return err == nil && s == id
}

// Check tells whether id is running: Alive when its pid runs with the same
// start time, Dead when the pid names no process or another one, Unknown
// when /proc cannot tell (EMFILE, EACCES, ...).
func Check(id ID) Liveness {
	if !validPID(id.PID) {
		return Dead // never a process: kill(0, 0) would even mean our group
	}
	now, err := StartTime(id.PID)
	return judge(id.Start, now, err, func() bool { return Gone(id.PID) })
}

// Gone reports whether pid certainly names no process. It is all a pid
// without a start time can tell: false means "alive or unknown".
func Gone(pid int) bool { return validPID(pid) && unix.Kill(pid, 0) == unix.ESRCH }

// Handle watches one process for its exit through a pidfd, through Go's
// runtime poller: waiting on it parks a goroutine, never an OS thread.
// Where the kernel has no pidfds (before Linux 5.3, or a seccomp filter),
// Open returns ErrNoPidfd and callers compare start times instead.
type Handle struct {
	id        ID
	file      *os.File
	rc        syscall.RawConn
	probe     func(fd uintptr) // sets exited: built once, so Exited allocates nothing
	exited    atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	watchOnce sync.Once
	done      chan struct{}
}

// ErrNoPidfd means the kernel offers no pidfd for a process.
var ErrNoPidfd = errors.New("proc: pidfds not available")

// Open returns a Handle for id. The error wraps ErrNoProcess when id is not
// running (already exited, or its pid was reused) and ErrNoPidfd where the
// kernel has no pidfds. The caller owns the Handle and must Close it.
func Open(id ID) (*Handle, error) {
	if !validPID(id.PID) {
		return nil, fmt.Errorf("proc: pidfd of %v: %w", id, ErrNoProcess)
	}
	fd, err := unix.PidfdOpen(id.PID, unix.PIDFD_NONBLOCK)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("proc: pidfd of %v: %w", id, ErrNoProcess)
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM), errors.Is(err, unix.EINVAL):
		return nil, fmt.Errorf("proc: pidfd of %v: %w", id, ErrNoPidfd)
	case err != nil:
		return nil, fmt.Errorf("proc: pidfd of %v: %w", id, err)
	}
	h := &Handle{id: id, file: os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(id.PID)), closed: make(chan struct{})}
	h.probe = func(fd uintptr) {
		if pidfdReadable(int(fd)) {
			h.exited.Store(true)
		}
	}
	if h.rc, err = h.file.SyscallConn(); err != nil {
		h.file.Close()
		return nil, fmt.Errorf("proc: pidfd of %v: %w", id, err)
	}
	// The pidfd was opened after the start time was recorded: check that
	// the pid still names the same process, or the handle would watch a
	// stranger that reused it.
	if now, err := StartTime(id.PID); err == nil && now != id.Start || errors.Is(err, ErrNoProcess) || h.Exited() {
		h.file.Close()
		return nil, fmt.Errorf("proc: pidfd of %v: %w", id, ErrNoProcess)
	}
	return h, nil
}

// ID is the process the handle watches.
func (h *Handle) ID() ID { return h.id }

// Exited reports, without blocking, whether the process has exited (even if
// it is not reaped yet). It makes one poll(2) until it or Done's watcher has
// seen the exit, none after, and allocates nothing. A closed handle reports
// what it saw. The poll is what makes it exact: a flag set only by the
// watcher would lag the exit by the runtime poller's latency, so a caller
// that learned of the exit otherwise (waitpid, a restarted producer) could
// still be told "running", and the ring would deliver a dead producer's
// frame (SPEC §7).
func (h *Handle) Exited() bool {
	if !h.exited.Load() {
		h.rc.Control(h.probe)
	}
	return h.exited.Load()
}

// pidfdReadable polls a pidfd once: readable means the process exited.
func pidfdReadable(fd int) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds[:], 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0
	}
}

// Done returns a channel closed when the process exits. The first call
// starts one goroutine, parked in the runtime poller until the pidfd is
// readable; Close ends it (the channel then stays open).
func (h *Handle) Done() <-chan struct{} {
	h.watchOnce.Do(func() {
		h.done = make(chan struct{})
		go h.watch()
	})
	return h.done
}

func (h *Handle) watch() {
	if h.rc.Read(func(fd uintptr) bool { return pidfdReadable(int(fd)) }) == nil {
		h.exited.Store(true) // Exited then needs no poll
		close(h.done)
	}
}

// Wait blocks until the process exits (nil), ctx ends (ctx.Err()) or the
// handle is closed (os.ErrClosed).
func (h *Handle) Wait(ctx context.Context) error {
	select {
	case <-h.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-h.closed:
		return os.ErrClosed
	}
}

// Close releases the pidfd. It is idempotent.
func (h *Handle) Close() error {
	var err error
	h.closeOnce.Do(func() {
		close(h.closed)
		err = h.file.Close()
	})
	return err
}
