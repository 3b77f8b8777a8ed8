//go:build linux

package connector_test

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// Many goroutines put, get, clean up and close one connector while a second
// connector of the scope claims too, on a ring small enough to fill and wrap
// (every fourth payload is too large for it). Every payload whose put
// succeeded is claimed exactly once or retired by Cleanup; once Close has
// run concurrently with puts, nothing more can be claimed and nothing is
// left in /dev/shm.
func TestConcurrentPutGetCleanupClose(t *testing.T) {
	s := shmtest.Scope(t)
	c := conntest.Open(t, s, "0", 4096)     // puts, claims, cleans up, and is closed
	other := conntest.Open(t, s, "1", 4096) // claims
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
			return conntest.Codes(1024, int64(i)) // 8 KiB: beyond a quarter of the ring
		}
		return conntest.Codes(8, int64(i))
	}
	deadline := time.Now().Add(wait)

	// Claimers sweep the published, unresolved keys until stopped (or,
	// for c, closed). A second claim of a key is what this test catches.
	stop := make(chan struct{})
	var claimers sync.WaitGroup
	claim := func(conn *connector.SHM) {
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
				if errors.Is(err, connector.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("get %d: %v", i, err)
					return
				}
				if ok {
					st[i].claims.Add(1)
					if got := conntest.CodesOf(t, v); got[0] != int64(i) {
						t.Errorf("key %d carried %d", i, got[0])
					}
				}
			}
			runtime.Gosched()
		}
	}
	for _, conn := range []*connector.SHM{c, c, other, other} {
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
					case errors.Is(err, connector.ErrClosed):
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
		for _, f := range []string{scope.Path(keys[i]), scope.Path(scope.LockName(keys[i]))} {
			if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s left after Close: %v", f, err)
			}
		}
	}
	if refused == 0 {
		t.Error("no put was refused: Close did not run during the puts")
	}
	if _, _, err := c.Put("0", "1", shmtest.Key("after-close"), conntest.Codes(1, 0)); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	t.Logf("phase 2: %d of %d puts refused by Close", refused, phase)
}
