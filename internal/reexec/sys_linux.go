package reexec

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// selfExe names this executable even if its file was replaced or deleted
// since it started.
func selfExe() string { return "/proc/self/exe" }

// sysProcAttr makes the kernel kill the child when this process dies, or
// (detach) gives it a session of its own.
func sysProcAttr(detach bool) *syscall.SysProcAttr {
	if detach {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// exited reports whether child pid has ended, without reaping it (WNOWAIT:
// exec.Cmd.Wait still collects its status). A child already reaped
// (ECHILD) has ended too.
func exited(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil {
		return errors.Is(err, unix.ECHILD)
	}
	// Linux zeroes info when WNOHANG finds nothing to report.
	return info.Signo != 0
}
