package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

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
		if gone(err) {
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

// pidfdReadable polls a pidfd once: readable means the process exited. A
// zero timeout never blocks, so the call skips the scheduler's bookkeeping
// for one that may (entersyscall and exitsyscall): a ring claim makes it
// every time.
func pidfdReadable(fd int) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	var zero unix.Timespec
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		return errno == 0 && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0
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

// File names a file by device and inode number, as stat reports them.
type File struct{ Dev, Ino uint64 }

// processes lists the pids in /proc.
func processes() ([]string, error) {
	names, err := readDir("/proc")
	if err != nil {
		return nil, err
	}
	pids := names[:0]
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && validPID(pid) {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// gone reports a /proc read that failed because the process exited.
func gone(err error) bool { return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) }

// OpenAnywhere reports which of files some process has open (a descriptor
// in /proc/{pid}/fd). complete is false when /proc could not be listed or
// some running process's descriptors could not be read: then a file not in
// open may still be open, and nothing may be concluded from its absence.
func OpenAnywhere(files []File) (open map[File]bool, complete bool) {
	open = map[File]bool{}
	pids, err := processes()
	if err != nil {
		return open, false
	}
	want := map[File]bool{}
	for _, f := range files {
		want[f] = true
	}
	complete = true
	for _, p := range pids {
		dir := "/proc/" + p + "/fd"
		fds, err := readDir(dir)
		if err != nil {
			complete = complete && gone(err)
			continue
		}
		for _, fd := range fds {
			var st unix.Stat_t
			if unix.Stat(dir+"/"+fd, &st) == nil && want[File{st.Dev, st.Ino}] {
				open[File{st.Dev, st.Ino}] = true
			}
		}
	}
	return open, complete
}

// MappedBy returns a process of uid that maps the file at path with inode
// ino (a line of /proc/{pid}/maps), or 0. Only uid's processes are read: a
// caller asks about a file only uid can open. complete is false when /proc
// could not be listed or a running process of uid's maps could not be
// read: then 0 does not mean that no process maps the file.
func MappedBy(uid int, path string, ino uint64) (pid int, complete bool) {
	pids, err := processes()
	if err != nil {
		return 0, false
	}
	complete = true
	suffix, inode := " "+path, " "+strconv.FormatUint(ino, 10)+" "
	for _, p := range pids {
		var st unix.Stat_t
		if err := unix.Stat("/proc/"+p, &st); err != nil || int(st.Uid) != uid {
			continue // exited, or another user's
		}
		maps, err := os.ReadFile("/proc/" + p + "/maps")
		if err != nil {
			complete = complete && gone(err)
			continue
		}
		for line := range strings.Lines(string(maps)) {
			if line = strings.TrimSuffix(line, "\n"); strings.HasSuffix(line, suffix) && strings.Contains(line, inode) {
				pid, _ = strconv.Atoi(p)
				return pid, true
			}
		}
	}
	return 0, complete
}

// readDir lists the names in dir.
func readDir(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
