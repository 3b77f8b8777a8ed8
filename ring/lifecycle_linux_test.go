package ring

import (
	"fmt"
	"omnishm/internal/shmtest"
	"omnishm/scope"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Tests of a Transport's own files over its life: setup, fallback, Close.

// scopeFiles lists what a scope has in /dev/shm: ring files and markers.
func scopeFiles(t testing.TB, sc string) (rings, markers []string, dirExists bool) {
	t.Helper()
	names := scope.New(sc)
	entries, err := os.ReadDir(scope.ShmDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), names.RingPrefix()) {
			rings = append(rings, e.Name())
		}
	}
	ms, err := os.ReadDir(names.RingDir())
	if err == nil {
		dirExists = true
		for _, m := range ms {
			markers = append(markers, m.Name())
		}
	}
	return rings, markers, dirExists
}

func TestSetupFailureFallsBackWithOneWarning(t *testing.T) {
	for _, c := range []struct {
		name    string
		install func() func()
	}{
		{"fallocate ENOSPC", func() func() {
			return setFallocate(func(int, uint32, int64, int64) error { return errNoSpace })
		}},
		{"stamp denied", func() func() {
			return setStampWriter(func(int, int64) error { return unix.EPERM })
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := shmtest.Scope(t)
			var mu sync.Mutex
			var warns []error
			live := map[string]bool{}
			tr, err := New(Options{Names: scope.New(sc), Capacity: 4096,
				OnSetupFailure: func(_, _ string, err error) { mu.Lock(); warns = append(warns, err); mu.Unlock() },
				OnCreate:       func(p string) { mu.Lock(); live[p] = true; mu.Unlock() },
				OnRemove:       func(p string) { mu.Lock(); delete(live, p); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			restore := c.install()
			for i := range 3 {
				if _, ok, err := putBytes(tr, "0", "1", fmt.Sprintf("k%d", i), []byte{1}); ok || err != nil {
					t.Fatalf("put: ok=%v err=%v, want a refusal", ok, err)
				}
			}
			restore()
			if _, ok, _ := putBytes(tr, "0", "1", "after", []byte{1}); ok {
				t.Fatal("a disabled edge used the ring again")
			}
			if len(warns) != 1 {
				t.Fatalf("setup failures reported %v, want one", warns)
			}
			rings, markers, _ := scopeFiles(t, sc)
			if len(rings) != 0 || len(markers) != 0 || len(live) != 0 {
				t.Fatalf("left rings %v markers %v tracked %v", rings, markers, live)
			}
			// another edge still works
			mustPut(t, tr, "0", "2", "other-edge", []byte{2})
			tr.Close()
			if _, _, dir := scopeFiles(t, sc); dir {
				t.Fatal("Close left the ring directory")
			}
		})
	}
}

func TestCloseIsIdempotentAndRemovesOwnedFiles(t *testing.T) {
	sc, p, r := pair(t, 4096)
	d := mustPut(t, p, "0", "1", "close", []byte{1})
	mustPut(t, p, "0", "1", "pending", []byte{2})
	mustGet(t, r, "0", "1", "close", nil)
	for range 2 {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A receiver that still maps the ring cannot deliver a closed
	// producer's frames: they were retired before the unlink.
	mustMiss(t, r, "0", "1", "pending", nil)
	for range 2 {
		r.Close()
	}
	if _, err := os.Stat(scope.ShmDir + "/" + d.Name); !os.IsNotExist(err) {
		t.Fatalf("ring file: %v", err)
	}
	rings, markers, dir := scopeFiles(t, sc)
	if len(rings)+len(markers) != 0 || dir {
		t.Fatalf("left %v %v dir=%v", rings, markers, dir)
	}
	if _, _, err := putBytes(p, "0", "1", "x", nil); err != ErrClosed {
		t.Fatalf("put after close: %v", err)
	}
	mustMiss(t, r, "0", "1", "x", nil)
}

func TestRingDirectoryRemovedAndRecreated(t *testing.T) {
	sc := shmtest.Scope(t)
	r := newTransport(t, sc, 4096)
	mustMiss(t, r, "0", "1", "before-any-producer", nil) // no directory yet
	for round := range 3 {
		p := newTransport(t, sc, 4096)
		key := fmt.Sprintf("round%d", round)
		mustPut(t, p, "0", "1", key, []byte{byte(round)})
		if b := mustGet(t, r, "0", "1", key, nil); b[0] != byte(round) {
			t.Fatalf("got %v", b)
		}
		p.Close() // last producer: the directory goes away
		if _, _, dir := scopeFiles(t, sc); dir {
			t.Fatal("ring directory left after its last producer closed")
		}
	}
}
