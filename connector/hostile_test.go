//go:build linux

package connector_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

// Files anyone can plant in /dev/shm at a key's names (SPEC §6): each is a
// miss for Get and for Recv, logged once by the connector, never an error
// per call; nothing is read through it or removed.

func openWarned(t *testing.T, s string, stage connector.Stage, ringBytes int) (*connector.SHM, *warnCounter) {
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

// A corrupt ring next to a live edge, its creator alive (this process): the
// legitimate producer's payloads keep arriving on both paths, ring and per
// key, by Get and by Recv, and the connector warns once.
func TestCorruptRingNextToALiveEdge(t *testing.T) {
	const ringBytes = 1 << 16
	cases := []struct {
		name string
		off  int64
		b    []byte
	}{
		{"bad magic", 0, []byte("NOTARING")},
		{"frame size not a multiple of 16", ring.HeaderSize, []byte{40, 0, 0, 0}},
		{"key past its frame", ring.HeaderSize + 10, []byte{0xff, 0xff}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := shmtest.Scope(t)
			names := scope.New(s)
			hostile, err := ring.New(ring.Options{Names: names, Capacity: ringBytes})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { hostile.Close() })
			if _, ok, err := hostile.Put("0", "1", "planted", ring.KindBytes, 4, func(dst []byte) error { return nil }); !ok || err != nil {
				t.Fatalf("plant: ok=%v err=%v", ok, err)
			}
			planted, _ := filepath.Glob(scope.Path(names.EdgePrefix("0", "1")) + "*")
			if len(planted) != 1 {
				t.Fatalf("rings %v, want the planted one", planted)
			}
			f, err := os.OpenFile(planted[0], os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(c.b, c.off); err != nil {
				t.Fatal(err)
			}
			f.Close()
			sender := conntest.Open(t, s, "0", ringBytes)
			receiver, warns := openWarned(t, s, "1", ringBytes)
			for i := range 10 {
				for _, n := range []int{4, ringBytes} { // the ring, then per key
					key := shmtest.Key("k" + strconv.Itoa(i) + "_" + strconv.Itoa(n))
					conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(n, int64(i)))
					if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[0] != int64(i) || len(got) != n {
						t.Fatalf("get %s: %d values from %d", key, len(got), got[0])
					}
					key += "r"
					conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(n, int64(i)))
					ctx, cancel := context.WithTimeout(context.Background(), wait)
					v, _, err := receiver.Recv(ctx, "0", key)
					cancel()
					if err != nil {
						t.Fatalf("recv %s: %v", key, err)
					}
					if got := conntest.CodesOf(t, v); got[0] != int64(i) || len(got) != n {
						t.Fatalf("recv %s: %d values from %d", key, len(got), got[0])
					}
				}
				conntest.Missing(t, receiver, "0", "1", "planted", nil)
			}
			if n := warns.n.Load(); n != 1 {
				t.Fatalf("%d warnings, want one", n)
			}
		})
	}
}
