package connector

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"omnishm/internal/shmtest"
)

// warnCounter counts the warnings a connector logs.
type warnCounter struct{ n atomic.Int32 }

func (h *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnCounter) WithGroup(string) slog.Handler      { return h }

// The seed's test_ring_setup_failure_keeps_connector_usable: a ring that
// cannot be set up (here its registry is a plain file, so no marker can be
// made) logs one warning for the edge, removes what it made, and the edge's
// puts take the per-key path, which a receiver of the scope still reads.
func TestRingSetupFailureKeepsConnectorUsable(t *testing.T) {
	s := shmtest.Scope(t)
	warns := &warnCounter{}
	o := DefaultOptions()
	o.WakeupScope, o.StageID, o.HostRingBytes, o.Logger = s, "0", 4096, slog.New(warns)
	sender, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sender.Close() })
	receiver := open(t, s, "1", 4096)
	registry := sender.Names().RingDir()
	if err := os.WriteFile(registry, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(registry) })
	for i := range 2 {
		key := shmtest.Key("no-ring")
		if d := mustPut(t, sender, "0", "1", key, codes(3, int64(i))); d.Shm == nil {
			t.Fatalf("put %d took %v, want the per-key path", i, d)
		}
		if got := int64s(t, mustGet(t, receiver, "0", "1", key, nil).(map[string]any)["codes"]); got[0] != int64(i) {
			t.Fatalf("got %v", got)
		}
	}
	if n := warns.n.Load(); n != 1 {
		t.Fatalf("%d warnings, want one for the edge", n)
	}
	if h := sender.Health(); h.HostRingPuts != 0 || h.HostRingFallbacks != 2 {
		t.Fatalf("health %+v", h)
	}
	if left, _ := filepath.Glob("/dev/shm/" + sender.Names().RingPrefix() + "*"); len(left) != 0 {
		t.Fatalf("the failed setup left %v", left)
	}
}

// Many goroutines put, get, clean up and close one connector while a second
// connector of the scope claims too, on a ring small enough to fill and wrap
// (every fourth payload is too large for it). Every payload whose put
// succeeded is claimed exactly once or retired by Cleanup; once Close has
// run concurrently with puts, nothing more can be claimed and nothing is
// left in /dev/shm.
func TestConcurrentPutGetCleanupClose(t *testing.T) {
	s := shmtest.Scope(t)
	c := open(t, s, "0", 4096)     // puts, claims, cleans up, and is closed
	other := open(t, s, "1", 4096) // claims
	const producers, phase = 4, 160
	keys := make([]string, 2*phase)
	for i := range keys {
		keys[i] = shmtest.Key("stress")
	}
	type outcome struct {
		put     atomic.Int32 // 1 published, 2 refused by Close
		claims  atomic.Int32
		retired atomic.Bool // Cleanup reported a retirement
	}
	st := make([]outcome, len(keys))
	value := func(i int) any {
		if i%4 == 0 {
			return codes(1024, int64(i)) // 8 KiB: beyond a quarter of the ring
		}
		return codes(8, int64(i))
	}
	deadline := time.Now().Add(wait)

	// Claimers sweep the published, unresolved keys until stopped (or,
	// for c, closed). A second claim of a key is what this test catches.
	stop := make(chan struct{})
	var claimers sync.WaitGroup
	claim := func(conn *SHM) {
		defer claimers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if time.Now().After(deadline) {
				t.Error("claimers still running at the deadline")
				return
			}
			for i := range keys {
				if st[i].put.Load() != 1 || st[i].claims.Load() > 0 || st[i].retired.Load() {
					continue
				}
				v, _, ok, err := conn.Get("0", "1", keys[i], nil)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("get %d: %v", i, err)
					return
				}
				if ok {
					st[i].claims.Add(1)
					if got := int64s(t, v.(map[string]any)["codes"]); got[0] != int64(i) {
						t.Errorf("key %d carried %d", i, got[0])
					}
				}
			}
			runtime.Gosched()
		}
	}
	for _, conn := range []*SHM{c, c, other, other} {
		claimers.Add(1)
		go claim(conn)
	}

	// Producers put keys[from:to]; every fifth published key is handed to
	// the cleaner. onPut runs after each put.
	produce := func(from, to int, onPut func()) {
		published := make(chan int, to-from)
		var cleaner sync.WaitGroup
		cleaner.Add(1)
		go func() {
			defer cleaner.Done()
			for i := range published {
				if c.Cleanup(keys[i]) {
					st[i].retired.Store(true)
				}
			}
		}()
		var wg sync.WaitGroup
		for g := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + g; i < to; i += producers {
					_, _, err := c.Put("0", "1", keys[i], value(i))
					switch {
					case err == nil:
						st[i].put.Store(1)
						if i%5 == 0 {
							published <- i
						}
					case errors.Is(err, ErrClosed):
						st[i].put.Store(2)
					default:
						t.Errorf("put %d: %v", i, err)
					}
					onPut()
				}
			}()
		}
		wg.Wait()
		close(published)
		cleaner.Wait()
	}

	// Phase 1: everything published is claimed or retired, exactly once.
	produce(0, phase, func() {})
	shmtest.Eventually(t, wait, "every payload claimed or retired", func() bool {
		for i := range phase {
			if st[i].claims.Load() == 0 && !st[i].retired.Load() {
				return false
			}
		}
		return true
	})
	for i := range phase {
		retired := 0
		if st[i].retired.Load() {
			retired = 1
		}
		if st[i].put.Load() != 1 || int(st[i].claims.Load())+retired != 1 {
			t.Fatalf("key %d: put %d, %d claims, retired %v", i, st[i].put.Load(), st[i].claims.Load(), retired == 1)
		}
	}

	// Phase 2: Close runs halfway through the puts, in the producer that
	// made the middle one, while the other producers go on.
	var puts atomic.Int32
	closed := make(chan error, 1)
	produce(phase, 2*phase, func() {
		if puts.Add(1) == phase/2 {
			closed <- c.Close()
		}
	})
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	close(stop)
	claimers.Wait()
	refused := 0
	for i := phase; i < 2*phase; i++ {
		if _, _, ok, err := other.Get("0", "1", keys[i], nil); ok || err != nil {
			t.Errorf("key %d claimed after its producer closed (err %v)", i, err)
		}
		put, claims := st[i].put.Load(), st[i].claims.Load()
		if put == 2 {
			refused++
		}
		if put == 0 || claims > 1 || claims == 1 && st[i].retired.Load() {
			t.Errorf("key %d: put %d, %d claims, retired %v", i, put, claims, st[i].retired.Load())
		}
		for _, f := range []string{"/dev/shm/" + keys[i], "/dev/shm/shm_" + keys[i] + "_lockfile.lock"} {
			if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s left after Close: %v", f, err)
			}
		}
	}
	if refused == 0 {
		t.Error("no put was refused: Close did not run during the puts")
	}
	if _, _, err := c.Put("0", "1", shmtest.Key("after-close"), codes(1, 0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	t.Logf("phase 2: %d of %d puts refused by Close", refused, phase)
}
