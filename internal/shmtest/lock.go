//go:build linux

package shmtest

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// lockRole is the child role every package's TestMain gets from Main.
const lockRole = "flock"

// Lock is another process holding an exclusive flock on a file, as a
// producer or receiver of another process does (SPEC §3, §6).
type Lock struct {
	p    *Proc
	done bool
}

// HoldLock starts a child that takes an exclusive flock on path and returns
// once it holds it. The lock is released when the test ends at the latest.
func HoldLock(t testing.TB, path string) *Lock {
	t.Helper()
	l := &Lock{p: Start(t, lockRole, path)}
	if line := l.p.Line(t, Patience); line != "locked" {
		t.Fatalf("lock holder of %s: %s", path, line)
	}
	return l
}

// Release lets the lock go and waits for the holder to exit.
func (l *Lock) Release(t testing.TB) { t.Helper(); l.end(t, "release") }

// ReleaseUnlinking removes path while still holding its lock, as a claiming
// receiver removes a lock file, then lets go.
func (l *Lock) ReleaseUnlinking(t testing.TB) { t.Helper(); l.end(t, "unlink") }

func (l *Lock) end(t testing.TB, how string) {
	t.Helper()
	if l.done {
		return
	}
	l.done = true
	l.p.Send(t, how)
	if err := l.p.Wait(t, Patience); err != nil {
		t.Fatalf("lock holder: %v", err)
	}
}

// holdLock is the child side of HoldLock.
func holdLock(args []string) int {
	path := args[0]
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	Say("locked")
	if Hear() == "unlink" {
		unix.Unlink(path)
	}
	unix.Close(fd)
	return 0
}
