//go:build linux

package connector_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/scope"
	"omnishm/tensor"
)

// Files anyone can plant in /dev/shm at a key's names (SPEC §6): each is a
// miss for Get and for Recv, logged once by the connector, never an error
// per call; nothing is read through it or removed.

func openWarned(t testing.TB, s string, stage connector.Stage, ringBytes int) (*connector.SHM, *warnCounter) {
	t.Helper()
	warns := &warnCounter{}
	c, err := connector.Open(connector.Options{WakeupScope: s, StageID: stage, HostRingBytes: ringBytes, Logger: slog.New(warns)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, warns
}

func TestPlantedFileAtAKeyIsAMiss(t *testing.T) {
	symlink := func(t *testing.T, at string) {
		target := shmtest.WriteFile(t, at+".target", []byte("\xa5their"))
		t.Cleanup(func() { os.Remove(target) })
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		plant func(t *testing.T, seg, lock string)
		root  bool
	}{
		{"symlink at the segment", func(t *testing.T, seg, lock string) {
			symlink(t, seg)
			shmtest.WriteFile(t, lock, nil)
		}, false},
		{"symlink at the lock file", func(t *testing.T, seg, lock string) {
			shmtest.WriteFile(t, seg, []byte("\xa5bytes"))
			symlink(t, lock)
		}, false},
		{"FIFO at the segment", func(t *testing.T, seg, lock string) {
			if err := unix.Mkfifo(seg, 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"another user's segment", func(t *testing.T, seg, lock string) {
			shmtest.Foreign(t, shmtest.WriteFile(t, seg, []byte("\xa5theirs")), shmtest.WriteFile(t, lock, nil))
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root to make a file of another uid")
			}
			receiver, warns := openWarned(t, shmtest.Scope(t), "1", connector.NoRing)
			key := shmtest.Key("planted")
			seg, lock := scope.Path(key), scope.Path(scope.LockName(key))
			t.Cleanup(func() { os.Remove(seg); os.Remove(lock) })
			c.plant(t, seg, lock)
			for range 3 {
				conntest.Missing(t, receiver, "0", "1", key, nil)
			}
			if n := warns.n.Load(); n != 1 {
				t.Fatalf("%d warnings after three gets, want one", n)
			}
			shmtest.AssertPresent(t, seg)
		})
	}
}

// A Recv of a key whose name holds a planted symlink keeps waiting, and
// gets the publication once the producer has replaced the link with it.
func TestRecvPastAPlantedSymlink(t *testing.T) {
	s := shmtest.Scope(t)
	sender := conntest.Open(t, s, "0", connector.NoRing)
	receiver, warns := openWarned(t, s, "1", connector.NoRing)
	key := shmtest.Key("planted-recv")
	target := shmtest.WriteFile(t, scope.Path(key)+".target", []byte("\xa5their"))
	t.Cleanup(func() { os.Remove(target); os.Remove(scope.Path(key)) })
	if err := os.Symlink(target, scope.Path(key)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, _, err := receiver.Recv(ctx, "0", key)
		done <- result{v, err}
	}()
	shmtest.Eventually(t, wait, "Recv to meet the symlink", func() bool { return warns.n.Load() > 0 })
	conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 9))
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := conntest.CodesOf(t, r.v); got[0] != 9 {
		t.Fatalf("got %v", got)
	}
	if n := warns.n.Load(); n != 1 {
		t.Fatalf("%d warnings, want one", n)
	}
	shmtest.AssertPresent(t, target)
}

// nobody is the unprivileged user a root test runs a child as.
const nobody = 65534

// roleAsNobody: scope key... As stage 0 and stage 1 of scope (run as
// another user than the test's), it puts a ring and a per-key payload of
// its own, says "ready", and on "go" checks three times over that each key
// (where the test planted root's 0600 files) is a miss by Get and by Recv,
// never an error, while its own payloads on both paths still arrive, past
// a ring of root's planted in its ring directory. It says "ok" and the
// number of warnings its connectors logged, or what went wrong.
func roleAsNobody(args []string) int {
	s, planted := args[0], args[1:]
	var opened []*connector.SHM
	defer func() {
		for _, c := range opened {
			c.Close()
		}
	}()
	warns := &warnCounter{}
	open := func(stage connector.Stage) (*connector.SHM, error) {
		c, err := connector.Open(connector.Options{WakeupScope: s, StageID: stage, HostRingBytes: hostileRing, PollInterval: time.Hour, Logger: slog.New(warns)})
		if err == nil {
			opened = append(opened, c)
		}
		return c, err
	}
	sender, err := open("0")
	if err != nil {
		return childFailed(err)
	}
	receiver, err := open("1")
	if err != nil {
		return childFailed(err)
	}
	own := 0
	deliver := func() error {
		for _, n := range []int{ringCodes, keyCodes} {
			own++
			key := "own" + strconv.Itoa(own)
			if _, _, err := sender.Put("0", "1", key, conntest.Codes(n, int64(own))); err != nil {
				return fmt.Errorf("put %s: %w", key, err)
			}
			v, _, ok, err := receiver.Get("0", "1", key, nil)
			if err != nil || !ok {
				return fmt.Errorf("get %s: ok=%v err=%v", key, ok, err)
			}
			if got, _ := tensor.Values[int64](v.(map[string]any)["codes"].(*tensor.Tensor)); len(got) != n || got[0] != int64(own) {
				return fmt.Errorf("get %s: %d values from %v", key, len(got), got[:1])
			}
		}
		return nil
	}
	if err := deliver(); err != nil { // makes the ring directory too
		return childFailed(err)
	}
	shmtest.Say("ready")
	shmtest.Hear()
	for range 3 {
		for _, key := range planted {
			if _, _, ok, err := receiver.Get("0", "1", key, nil); ok || err != nil {
				shmtest.Say("get %s: ok=%v err=%v", key, ok, err)
				return 0
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, _, err := receiver.Recv(ctx, "0", key)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				shmtest.Say("recv %s: %v", key, err)
				return 0
			}
		}
		if err := deliver(); err != nil {
			shmtest.Say("%v", err)
			return 0
		}
	}
	shmtest.Say("ok %d", warns.n.Load())
	return 0
}

// Another user's process (a child as nobody) meets root's 0600 files at a
// key's names and a root ring in its ring directory: opening them fails
// with EACCES, which is a miss or a contained fault, never an error per
// call, and said once each; its own payloads keep arriving on both paths.
func TestOtherUsersFilesUnopenable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another user")
	}
	s := shmtest.Scope(t)
	names := scope.ForUID(nobody, s, 0)
	bothRoot, rootLock, lockOnly := shmtest.Key("rootboth"), shmtest.Key("rootlock"), shmtest.Key("lockonly")
	var planted []string
	t.Cleanup(func() {
		for _, p := range planted {
			os.Remove(p)
		}
		os.Remove(names.RingDir())
		shmtest.AssertAbsent(t, names.RingDir(), names.WakeDir)
	})
	plant := func(path string, data []byte, uid int) {
		planted = append(planted, shmtest.WriteFile(t, path, data))
		if err := os.Lchown(path, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	child := shmtest.StartAs(t, &syscall.Credential{Uid: nobody, Gid: nobody}, "asnobody", s, bothRoot, rootLock, lockOnly)
	if l := child.Line(t, wait); l != "ready" {
		t.Fatalf("child: %s", l)
	}
	plant(scope.Path(bothRoot), []byte("\xa5root's"), 0)
	plant(scope.Path(scope.LockName(bothRoot)), nil, 0)
	plant(scope.Path(rootLock), []byte("\xa5nobody's"), nobody)
	plant(scope.Path(scope.LockName(rootLock)), nil, 0)
	plant(scope.Path(scope.LockName(lockOnly)), nil, 0)
	id, err := scope.NewID()
	if err != nil {
		t.Fatal(err)
	}
	rootRing := names.RingName("0", "1", os.Getpid(), id)
	plant(scope.Path(rootRing), make([]byte, 4096), 0)
	plant(names.MarkerPath(rootRing), nil, 0)
	child.Send(t, "go")
	// Two warnings: one for the files at keys, one for the ring, rejected
	// once and not tried again.
	if l := child.Line(t, wait); l != "ok 2" {
		t.Fatalf("child: %s, want ok and two warnings", l)
	}
	if err := child.Wait(t, wait); err != nil {
		t.Fatal(err)
	}
}
