package ring

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// countingHandler counts warnings.
type countingHandler struct {
	mu    sync.Mutex
	warns []string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.mu.Lock()
		h.warns = append(h.warns, r.Message)
		h.mu.Unlock()
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

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
			h := &countingHandler{}
			var mu sync.Mutex
			live := map[string]bool{}
			tr, err := New(Options{Names: scope.New(sc), Capacity: 4096, Logger: slog.New(h),
				OnCreate: func(p string) { mu.Lock(); live[p] = true; mu.Unlock() },
				OnRemove: func(p string) { mu.Lock(); delete(live, p); mu.Unlock() }})
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
			if len(h.warns) != 1 {
				t.Fatalf("warnings %q, want one", h.warns)
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

// roleProducer: args scope, key, value. Puts, prints the descriptor, then
// obeys one command: "exit" (without Close), "close", or waits to be killed.
func roleProducer(args []string) int {
	tr, err := New(Options{Names: scope.New(args[0]), Capacity: 4096, Logger: quiet})
	if err != nil {
		return 1
	}
	d, ok, err := putBytes(tr, "0", "1", args[1], []byte(args[2]))
	if !ok || err != nil {
		return 1
	}
	b, _ := json.Marshal(d)
	shmtest.Say("%s", b)
	switch shmtest.Hear() {
	case "close":
		tr.Close()
	case "exit":
		os.Exit(0)
	}
	return 0
}

func TestDeadProducerFramesNeverDelivered(t *testing.T) {
	for _, how := range []string{"exit", "kill"} {
		t.Run(how, func(t *testing.T) {
			sc := shmtest.Scope(t)
			r := newTransport(t, sc, 4096)
			child := shmtest.Start(t, "producer", sc, "restart", "11")
			var old descriptor.RingHandle
			if err := json.Unmarshal([]byte(child.Line(t, wait)), &old); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { // in case the receiver did not prune them
				os.Remove(scope.ShmDir + "/" + old.Name)
				os.Remove(scope.New(sc).RingDir() + "/" + old.Name)
				os.Remove(scope.New(sc).RingDir())
			})
			// Attach the live ring (and index its frame) without claiming.
			mustMiss(t, r, "0", "1", "not-published", nil)
			if len(r.readerFDs()) != 1 {
				t.Fatal("ring not attached")
			}
			if how == "exit" {
				child.Send(t, "exit")
				if err := child.Wait(t, wait); err != nil {
					t.Fatal(err)
				}
			} else {
				child.Kill()
			}
			mustMiss(t, r, "0", "1", "restart", &old)
			mustMiss(t, r, "0", "1", "restart", nil)
			if n := len(r.readerFDs()); n != 0 {
				t.Fatalf("%d rings still attached", n)
			}
			replacement := newTransport(t, sc, 4096)
			mustPut(t, replacement, "0", "1", "restart", []byte("22"))
			if got := mustGet(t, r, "0", "1", "restart", nil); string(got) != "22" {
				t.Fatalf("got %q", got)
			}
			// Discovery pruned the dead producer's marker and its ring.
			if _, err := os.Stat(scope.ShmDir + "/" + old.Name); !os.IsNotExist(err) {
				t.Fatalf("dead ring file: %v", err)
			}
			if _, err := os.Stat(scope.New(sc).RingDir() + "/" + old.Name); !os.IsNotExist(err) {
				t.Fatalf("dead marker: %v", err)
			}
		})
	}
}

func TestPythonRingAttachRejectedAsDeadProducer(t *testing.T) {
	sc := shmtest.Scope(t)
	names := scope.New(sc)
	file, want := loadRingVector(t)
	name := names.EdgePrefix("0", "1") + "109620_" + strings.Repeat("ab", 16)
	path := scope.ShmDir + "/" + name
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path); os.Remove(names.RingDir() + "/" + name); os.Remove(names.RingDir()) })
	r := newTransport(t, sc, 4096)
	for key, w := range want.Ready {
		d := descriptor.RingHandle{Name: name, Position: w.Position, Size: w.Size}
		mustMiss(t, r, "0", "1", key, &d)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal("a descriptor miss removed the ring")
	}
	// Through discovery the marker is pruned and the dead ring removed.
	if err := os.Mkdir(names.RingDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(names.RingDir()+"/"+name, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mustMiss(t, r, "0", "1", "req55_0_55", nil)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("dead ring: %v", err)
	}
	if _, err := os.Stat(names.RingDir() + "/" + name); !os.IsNotExist(err) {
		t.Fatalf("marker: %v", err)
	}
	// The bad descriptor name is an error, not a miss.
	if _, _, _, err := r.Get("0", "1", "k", &descriptor.RingHandle{Name: "../etc/passwd"}, decodeCopy); err == nil {
		t.Fatal("invalid ring name accepted")
	}
}

func TestGoProducerPythonLayout(t *testing.T) {
	// The file a Go producer writes parses as the Python layout: header,
	// 16-byte aligned frames, padding at the wrap, state byte at 9.
	_, p, r := pair(t, 4096)
	var d descriptor.RingHandle
	for i := range 9 {
		d = mustPut(t, p, "0", "1", fmt.Sprintf("req%d_0_%d", i, i), codes(i))
		if i < 7 {
			mustGet(t, r, "0", "1", fmt.Sprintf("req%d_0_%d", i, i), nil)
		}
	}
	file, err := os.ReadFile(scope.ShmDir + "/" + d.Name)
	if err != nil {
		t.Fatal(err)
	}
	h, frames, err := Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := StartTime(os.Getpid())
	if string(file[:8]) != "OMSHMR01" || h.Capacity != 4096 || h.CreatorPID != uint64(os.Getpid()) || h.CreatorStart != start {
		t.Fatalf("header %+v", h)
	}
	if !bytes.Equal(file[48:64], make([]byte, 16)) {
		t.Fatal("header bytes 48..63 not zero")
	}
	ready := 0
	for _, f := range frames {
		if f.Kind == KindBytes && !f.Done {
			ready++
			want := 16 + len(f.Key) + f.PayloadLen
			if f.Total != (want+15)&^15 {
				t.Fatalf("frame %+v", f)
			}
		}
	}
	if ready != 2 || frames[len(frames)-1].Position != d.Position {
		t.Fatalf("frames %+v", frames)
	}
	info, err := Inspect(scope.ShmDir + "/" + d.Name)
	if err != nil || info.Busy || !info.Alive || len(info.Frames) != len(frames) {
		t.Fatalf("Inspect: %+v %v", info, err)
	}
}

func TestPruneRemovesOnlyDeadProducers(t *testing.T) {
	sc := shmtest.Scope(t)
	names := scope.New(sc)
	live := newTransport(t, sc, 4096)
	d := mustPut(t, live, "0", "1", "live", []byte{1})
	file, _ := loadRingVector(t)
	dead := names.EdgePrefix("0", "1") + "109620_" + strings.Repeat("cd", 16)
	stale := names.EdgePrefix("0", "1") + "1_" + strings.Repeat("ef", 16)
	if err := os.WriteFile(scope.ShmDir+"/"+dead, file, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{dead, stale} {
		if err := os.WriteFile(names.RingDir()+"/"+m, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range []string{scope.ShmDir + "/" + dead, names.RingDir() + "/" + dead, names.RingDir() + "/" + stale} {
			os.Remove(p)
		}
	})
	removed, err := Prune(names)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{scope.ShmDir + "/" + dead, names.RingDir() + "/" + dead, names.RingDir() + "/" + stale}
	slices.Sort(removed)
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, p := range []string{scope.ShmDir + "/" + d.Name, names.RingDir() + "/" + d.Name} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("live producer's %s: %v", p, err)
		}
	}
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

func TestNewProducerInAnotherProcess(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprintf("watcher=%v", watched), func(t *testing.T) {
			defer setWatcher(watched)()
			sc, p, r := pair(t, 4096)
			mustPut(t, p, "0", "1", "first", []byte{1})
			mustGet(t, r, "0", "1", "first", nil)
			mustMiss(t, r, "0", "1", "from-child", nil) // edge discovered, stamp cached
			child := shmtest.Start(t, "producer", sc, "from-child", "hi")
			child.Line(t, wait) // put done
			if watched {
				// The watcher reads the child's registry event asynchronously.
				shmtest.Eventually(t, wait, "the child's ring", func() bool {
					_, ok, err := getBytes(r, "0", "1", "from-child", nil)
					if err != nil {
						t.Fatal(err)
					}
					return ok
				})
			} else if got := mustGet(t, r, "0", "1", "from-child", nil); string(got) != "hi" {
				t.Fatalf("got %q", got)
			}
			child.Send(t, "close")
			if err := child.Wait(t, wait); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Refresh makes a registry change made before it visible to the next Get,
// even while the watcher loop has not run (held back here).
func TestRefreshSeesANewProducerBeforeTheWatcher(t *testing.T) {
	gate := make(chan struct{})
	drainGate.Store(&gate)
	defer drainGate.Store(nil)
	released := false
	release := func() {
		if !released {
			released = true
			close(gate)
		}
	}
	defer release()
	sc, p, r := pair(t, 4096)
	mustPut(t, p, "0", "1", "first", []byte{1})
	mustGet(t, r, "0", "1", "first", nil)
	mustMiss(t, r, "0", "1", "from-child", nil) // edge discovered, stamp cached
	child := shmtest.Start(t, "producer", sc, "from-child", "hi")
	child.Line(t, wait) // its ring, marker and frame exist
	r.Refresh()
	if got := mustGet(t, r, "0", "1", "from-child", nil); string(got) != "hi" {
		t.Fatalf("got %q", got)
	}
	release()
	child.Send(t, "close")
	if err := child.Wait(t, wait); err != nil {
		t.Fatal(err)
	}
}
