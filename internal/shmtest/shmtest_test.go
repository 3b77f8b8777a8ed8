//go:build linux

package shmtest

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	Main(m, map[string]func([]string) int{
		"echo": func(args []string) int {
			Say("args=%s", strings.Join(args, ","))
			Say("got=%s", Hear())
			return 0
		},
		"fail": func([]string) int { return 3 },
	})
}

func TestChildRoundTrip(t *testing.T) {
	p := Start(t, "echo", "a", "b c")
	if got := p.Line(t, 10*time.Second); got != "args=a,b c" {
		t.Fatalf("child saw %q", got)
	}
	p.Send(t, "hello")
	if got := p.Line(t, 10*time.Second); got != "got=hello" {
		t.Fatalf("child echoed %q", got)
	}
	if err := p.Wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := Start(t, "fail").Wait(t, 10*time.Second); err == nil {
		t.Fatal("exit 3 reported as success")
	}
}

func TestLeftoversSeesOwnKeys(t *testing.T) {
	k := Key("left")
	if err := os.WriteFile("/dev/shm/"+k, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range Leftovers() {
		found = found || l == k
	}
	os.Remove("/dev/shm/" + k)
	if !found {
		t.Fatal("leftover key not reported")
	}
	for _, l := range Leftovers() {
		if l == k {
			t.Fatal("removed key still reported")
		}
	}
}

func TestHoldLock(t *testing.T) {
	path := t.TempDir() + "/lock"
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tryLock := func() error {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	}
	l := HoldLock(t, path)
	if err := tryLock(); err != unix.EWOULDBLOCK {
		t.Fatalf("lock not held by the child: %v", err)
	}
	l.Release(t)
	if err := tryLock(); err != nil {
		t.Fatalf("lock not released: %v", err)
	}
	HoldLock(t, path).ReleaseUnlinking(t)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("path survives ReleaseUnlinking: %v", err)
	}
}
