package ring

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// errNoProcess means the pid names no live process (SPEC §7: the producer
// is gone), as opposed to a failure to find out.
var errNoProcess = errors.New("no such process")

// StartTime returns field 22 (starttime, in clock ticks since boot) of
// /proc/{pid}/stat: with the pid it names one process for its whole life,
// which is how rings identify their producer (SPEC §3, §7).
func StartTime(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("ring: start time of pid %d: %w", pid, errNoProcess)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return 0, fmt.Errorf("ring: start time of pid %d: %w", pid, errNoProcess)
		}
		return 0, fmt.Errorf("ring: start time of pid %d: %w", pid, err)
	}
	return parseStartTime(stat)
}

// parseStartTime reads field 22 of a stat line. The command name (field 2)
// may hold spaces and ')' so fields are counted after the LAST ')'.
func parseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("ring: malformed /proc stat line")
	}
	fields := bytes.Fields(stat[i+1:])
	if len(fields) < 20 { // fields 3..22
		return 0, fmt.Errorf("ring: short /proc stat line")
	}
	v, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ring: /proc stat start time: %w", err)
	}
	return v, nil
}

// Alive reports whether pid is a running process that started at start:
// false once it exited or its pid was reused (SPEC §7).
func Alive(pid int, start uint64) bool {
	s, err := StartTime(pid)
	return err == nil && s == start
}

// openPidfd returns a pidfd for pid, or -1 where the kernel has none
// (ENOSYS before Linux 5.3, or a seccomp filter): callers then check the
// start time instead (SPEC §7). errNoProcess when pid does not exist.
func openPidfd(pid int) (int, error) {
	if pid <= 0 || pid > 1<<31-1 {
		return -1, errNoProcess
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.ESRCH):
		return -1, errNoProcess
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM), errors.Is(err, unix.EINVAL):
		return -1, nil
	}
	return -1, fmt.Errorf("ring: pidfd_open %d: %w", pid, err)
}

// pidfdExited reports whether a pidfd is readable: the process has exited
// (even if not reaped yet).
func pidfdExited(fd int) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds[:], 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0
	}
}

// self is this process's identity, to tell our own rings from a peer's.
var self = func() struct {
	pid   int
	start uint64
} {
	pid := os.Getpid()
	start, _ := StartTime(pid)
	return struct {
		pid   int
		start uint64
	}{pid, start}
}()
