//go:build linux

package connector_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
)

// paths are the two kinds of publication: a ring frame, and a per-key
// segment (the ring off).
var paths = []struct {
	name      string
	ringBytes int
	seg       bool
}{{"ring", ring.DefaultCapacity, false}, {"per-key", connector.NoRing, true}}

// putOn puts a small payload under a fresh key and checks which path took it.
func putOn(t *testing.T, c *connector.SHM, name string, seg bool) (string, connector.Descriptor) {
	t.Helper()
	key := shmtest.Key(name)
	d := conntest.MustPut(t, c, "0", "1", key, conntest.Codes(8, 1))
	if (d.Shm != nil) != seg {
		t.Fatalf("descriptor %v, want per-key %v", d, seg)
	}
	return key, d
}

// waitAsync runs WaitClaimed in a goroutine and returns once it is under
// way; the channel gets its result.
func waitAsync(t *testing.T, ctx context.Context, c *connector.SHM, d connector.Descriptor) <-chan error {
	t.Helper()
	before := connector.ClaimWaits(c)
	done := make(chan error, 1)
	go func() { done <- c.WaitClaimed(ctx, d) }()
	shmtest.Eventually(t, shmtest.Patience, "WaitClaimed to begin", func() bool {
		return connector.ClaimWaits(c) > before || len(done) > 0
	})
	return done
}

// result waits for a WaitClaimed started by waitAsync (or a Shutdown).
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	return shmtest.Await(t, shmtest.Patience, "the wait to return", done)
}

// notYet fails the test if a WaitClaimed (or Shutdown) has returned
// already: called where nothing could have ended it.
func notYet(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("returned %v before anything could end the wait", err)
	default:
	}
}

// wantRetired checks that err says the publication was retired, and how.
func wantRetired(t *testing.T, err error, how string) {
	t.Helper()
	if !errors.Is(err, connector.ErrRetired) || !strings.Contains(err.Error(), how) {
		t.Fatalf("error %v: want connector.ErrRetired saying %q", err, how)
	}
}

// Claimed tells the three fates apart on both paths: waiting, claimed by a
// receiver, retired by Cleanup (an error that says so).
func TestClaimed(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			sender, receiver := conntest.Edge(t, p.ringBytes)
			claimed := func(d connector.Descriptor) bool {
				t.Helper()
				ok, err := sender.Claimed(d)
				if err != nil {
					t.Fatalf("Claimed(%v): %v", d, err)
				}
				return ok
			}
			key, d := putOn(t, sender, "claimed", p.seg)
			if claimed(d) {
				t.Fatal("claimed before any receiver")
			}
			conntest.MustGet(t, receiver, "0", "1", key, &d)
			if !claimed(d) || !claimed(d) {
				t.Fatal("not claimed after the receiver took it")
			}

			retired, d := putOn(t, sender, "retired", p.seg)
			if !sender.Cleanup(retired) {
				t.Fatal("Cleanup retired nothing")
			}
			for range 2 { // the answer stays
				ok, err := sender.Claimed(d)
				if ok {
					t.Fatal("a retired publication reads as claimed")
				}
				wantRetired(t, err, "by Cleanup")
			}
		})
	}
	sender, _ := conntest.Edge(t, 0)
	if _, err := sender.Claimed(connector.Descriptor{}); !errors.Is(err, descriptor.ErrBad) {
		t.Errorf("Claimed(empty descriptor) = %v", err)
	}
	if err := sender.WaitClaimed(context.Background(), connector.Descriptor{}); !errors.Is(err, descriptor.ErrBad) {
		t.Errorf("WaitClaimed(empty descriptor) = %v", err)
	}
}

// WaitClaimed returns nil once a receiver in another process claims the
// publication, on both paths.
func TestWaitClaimedByAnotherProcess(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			s := shmtest.Scope(t)
			sender := conntest.Open(t, s, "0", p.ringBytes)
			key, d := putOn(t, sender, "xclaim", p.seg)
			r := shmtest.Start(t, "receiver", s, key)
			r.Expect(t, shmtest.Patience, "ready")
			done := waitAsync(t, context.Background(), sender, d)
			notYet(t, done) // the child claims only once told to
			r.Send(t, "go")
			// The child's line first: a wait that never ends then says
			// whether the child took the publication at all.
			r.Expect(t, shmtest.Patience, "[1,2,3,4,5,6,7,8]")
			if err := result(t, done); err != nil {
				t.Fatalf("WaitClaimed: %v", err)
			}
			r.Exited(t, shmtest.Patience)
			if ok, err := sender.Claimed(d); !ok || err != nil {
				t.Fatalf("Claimed after WaitClaimed: %v %v", ok, err)
			}
		})
	}
}

// WaitClaimed ends with ErrRetired, saying how, for every way this
// connector retires a publication, whether the retirement comes before the
// wait or during it; and with ctx's error when ctx ends first.
func TestWaitClaimedRetired(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			ctx := context.Background()
			for _, r := range []struct {
				name, how string
				retire    func(c *connector.SHM, key string)
			}{
				{"cleanup", "by Cleanup", func(c *connector.SHM, key string) { c.Cleanup(key) }},
				{"prefix", "by Cleanup", func(c *connector.SHM, key string) { c.CleanupPrefix(key[:strings.LastIndex(key, "_")+1]) }},
			} {
				for _, during := range []bool{false, true} {
					sender, _ := conntest.Edge(t, p.ringBytes)
					key, d := putOn(t, sender, r.name, p.seg)
					if !during {
						r.retire(sender, key)
						wantRetired(t, sender.WaitClaimed(ctx, d), r.how)
						continue
					}
					done := waitAsync(t, ctx, sender, d)
					notYet(t, done)
					r.retire(sender, key)
					wantRetired(t, result(t, done), r.how)
				}
			}

			// Close retires what a wait under way waits for, and says so
			// afterwards too; of a publication nobody waited on, a call
			// after Close knows nothing: ErrClosed.
			sender, _ := conntest.Edge(t, p.ringBytes)
			_, d := putOn(t, sender, "close", p.seg)
			_, unwatched := putOn(t, sender, "close-unwatched", p.seg)
			done := waitAsync(t, ctx, sender, d)
			notYet(t, done)
			if err := sender.Close(); err != nil {
				t.Fatal(err)
			}
			wantRetired(t, result(t, done), "by Close")
			wantRetired(t, sender.WaitClaimed(ctx, d), "by Close")
			if err := sender.WaitClaimed(ctx, unwatched); !errors.Is(err, connector.ErrClosed) {
				t.Fatalf("WaitClaimed after Close: %v", err)
			}
			if _, err := sender.Claimed(unwatched); !errors.Is(err, connector.ErrClosed) {
				t.Fatalf("Claimed after Close: %v", err)
			}

			// ctx ends the wait.
			sender, _ = conntest.Edge(t, p.ringBytes)
			_, d = putOn(t, sender, "ctx", p.seg)
			cctx, cancel := context.WithCancel(ctx)
			done = waitAsync(t, cctx, sender, d)
			notYet(t, done)
			cancel()
			if err := result(t, done); !errors.Is(err, context.Canceled) {
				t.Fatalf("WaitClaimed after cancel: %v", err)
			}
		})
	}
}

// A later put of the key replaces a ring frame unclaimed: the old
// descriptor is retired, the new one waits. A per-key descriptor names its
// key, so it speaks of the newest publication.
func TestWaitClaimedReplaced(t *testing.T) {
	ctx := context.Background()
	sender, receiver := conntest.Edge(t, ring.DefaultCapacity)
	key, old := putOn(t, sender, "reput", false)
	done := waitAsync(t, ctx, sender, old)
	notYet(t, done)
	d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(8, 2))
	wantRetired(t, result(t, done), "replaced by a later put")
	wantRetired(t, sender.WaitClaimed(ctx, old), "replaced")
	if ok, err := sender.Claimed(d); ok || err != nil {
		t.Fatalf("the new publication: %v %v", ok, err)
	}
	conntest.MustGet(t, receiver, "0", "1", key, nil)
	if err := sender.WaitClaimed(ctx, d); err != nil {
		t.Fatal(err)
	}
	// Claimed first, then put again: the old one stays claimed.
	d2 := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(8, 3))
	if err := sender.WaitClaimed(ctx, d); err != nil {
		t.Fatalf("a claimed publication after a re-put of its key: %v", err)
	}
	sender.Cleanup(key)
	wantRetired(t, sender.WaitClaimed(ctx, d2), "by Cleanup")

	// Across the paths: a per-key put replaces the key's ring frame (the
	// ring retires it), a ring put the key's segment.
	key, old = putOn(t, sender, "reput-across", false)
	d = conntest.MustPut(t, sender, "0", "1", key, bigCodes())
	if d.Shm == nil {
		t.Fatalf("descriptor %v, want per-key", d)
	}
	wantRetired(t, sender.WaitClaimed(ctx, old), "replaced by a later put")
	if d2 = conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(8, 4)); d2.HostRing == nil {
		t.Fatalf("descriptor %v, want a ring frame", d2)
	}
	wantRetired(t, sender.WaitClaimed(ctx, d), "replaced by a later put")
	if ok, err := sender.Claimed(d2); ok || err != nil {
		t.Fatalf("the ring frame after the segment: %v %v", ok, err)
	}

	sender, receiver = conntest.Edge(t, connector.NoRing)
	key, old = putOn(t, sender, "reput-seg", true)
	d = conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(8, 2))
	if ok, err := sender.Claimed(old); ok || err != nil {
		t.Fatalf("per-key descriptor after a re-put: %v %v", ok, err)
	}
	conntest.MustGet(t, receiver, "0", "1", key, &d)
	if err := sender.WaitClaimed(ctx, old); err != nil {
		t.Fatal(err)
	}
}

// Many waiters on per-key publications share the connector's one /dev/shm
// watch: each claim ends its own waiter, whichever waiter took the event.
func TestWaitClaimedManySegments(t *testing.T) {
	const n = 16
	sender, receiver := conntest.Edge(t, connector.NoRing)
	ctx := context.Background()
	keys := make([]string, n)
	done := make([]<-chan error, n)
	for i := range n {
		var d connector.Descriptor
		keys[i], d = putOn(t, sender, "many", true)
		done[i] = waitAsync(t, ctx, sender, d)
	}
	for i := range n {
		notYet(t, done[i])
		conntest.MustGet(t, receiver, "0", "1", keys[i], nil)
		if err := result(t, done[i]); err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
}
