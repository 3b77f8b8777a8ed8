package reexec

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// gone reports whether pid has exited (a zombie counts: it runs no more).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDiesWithParent: a child dies with its parent, even by SIGKILL; a
// detached one outlives it.
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
				eventually(t, "the child to die with its parent", func() bool { return gone(pid) })
				return
			}
			if gone(pid) {
				t.Fatal("detached child died with its parent")
			}
			if sid, err := unix.Getsid(pid); err != nil || sid != pid {
				t.Errorf("detached child's session %d (%v), want its own", sid, err)
			}
			syscall.Kill(pid, syscall.SIGKILL)
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
	eventually(t, "the child to end", func() bool { return exited(cmd.Process.Pid) })
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Wait after exited: %v, want exit status 3", err)
	}
	if !exited(cmd.Process.Pid) {
		t.Fatal("a reaped child reported running")
	}
}
