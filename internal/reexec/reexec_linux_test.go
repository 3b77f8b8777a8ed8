package reexec

import (
	"errors"
	"os/exec"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// waitGone blocks until process pid (not necessarily our child) has
// exited, through a pidfd, which becomes readable then.
func waitGone(t *testing.T, pid int, timeoutMS int) bool {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil {
		t.Skip("no pidfd:", err)
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, timeoutMS)
		if err != unix.EINTR {
			return err == nil && n == 1
		}
	}
}

// TestDiesWithParent: a child dies with its parent, even by SIGKILL; a
// detached one outlives it, in a session of its own.
func TestDiesWithParent(t *testing.T) {
	for _, how := range []string{"attached", "detach"} {
		t.Run(how, func(t *testing.T) {
			p := start(t, "parent", Options{Args: []string{how}})
			pid, err := strconv.Atoi(line(t, p))
			if err != nil {
				t.Fatal(err)
			}
			p.Kill()
			if how == "attached" {
				if !waitGone(t, pid, int(patience.Milliseconds())) {
					t.Fatal("the child outlived its parent")
				}
				return
			}
			defer unix.Kill(pid, unix.SIGKILL)
			if waitGone(t, pid, 0) {
				t.Fatal("detached child died with its parent")
			}
			if sid, err := unix.Getsid(pid); err != nil || sid != pid {
				t.Errorf("detached child's session %d (%v), want its own", sid, err)
			}
		})
	}
}

// TestExitedWithoutReaping: a child that has ended is seen without being
// reaped, so exec.Cmd.Wait still collects its status.
func TestExitedWithoutReaping(t *testing.T) {
	cmd := exec.Command("sh", "-c", "read x; exit 3")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skip("no sh:", err)
	}
	if exited(cmd.Process.Pid) {
		t.Fatal("a running child reported ended")
	}
	in.Close()
	// Block until it has ended, leaving it unreaped.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if !exited(cmd.Process.Pid) {
		t.Fatal("an ended child reported running")
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Wait after exited: %v, want exit status 3", err)
	}
	if !exited(cmd.Process.Pid) {
		t.Fatal("a reaped child reported running")
	}
}
