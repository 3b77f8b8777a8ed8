//go:build linux

package connector_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/race"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

// edgeStats returns the figures of edge from->to, failing the test when the
// connector has none.
func edgeStats(t *testing.T, c *connector.SHM, from, to string) connector.EdgeStats {
	t.Helper()
	for _, e := range c.Stats().Edges {
		if e.From == from && e.To == to {
			return e
		}
	}
	t.Fatalf("no stats for edge %s->%s: %+v", from, to, c.Stats().Edges)
	return connector.EdgeStats{}
}

// Each reason a put leaves the ring is counted as that reason, on its edge,
// and the per-edge figures add up to Health's.
func TestStatsCountFallbackReasons(t *testing.T) {
	cases := []struct {
		name      string
		ringBytes int
		from, to  string
		setup     func(t *testing.T, c *connector.SHM)
		payload   any
		// fallback is the reason every put falls back for; with fills the
		// puts take the ring until it refuses them, and both paths are used.
		fallback connector.Fallback
		ring     bool // every put takes the ring
		fills    bool
		puts     int
	}{
		{name: "ring", ringBytes: ring.MinCapacity, from: "0", to: "1", puts: 2,
			payload: conntest.Codes(3, 0), ring: true},
		{name: "frame too large", ringBytes: ring.MinCapacity, from: "0", to: "1", puts: 2,
			payload: conntest.Codes(4096, 0), fallback: connector.FallbackFrameTooLarge},
		{name: "ring disabled", ringBytes: connector.NoRing, from: "0", to: "1", puts: 2,
			payload: conntest.Codes(3, 0), fallback: connector.FallbackRingDisabled},
		{name: "non-numeric stage", ringBytes: ring.MinCapacity, from: "encoder", to: "1", puts: 2,
			payload: conntest.Codes(3, 0), fallback: connector.FallbackNonNumericStage},
		{name: "setup failed", ringBytes: ring.MinCapacity, from: "0", to: "1", puts: 2,
			// A plain file where the ring directory goes: no marker can be made.
			setup: func(t *testing.T, c *connector.SHM) {
				registry := c.Names().RingDir()
				if err := os.WriteFile(registry, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Remove(registry) })
			},
			payload: conntest.Codes(3, 0), fallback: connector.FallbackSetupFailed},
		// Nobody claims the frames, so the 4 KiB ring fills up.
		{name: "ring full", ringBytes: ring.MinCapacity, from: "0", to: "1", puts: 12,
			payload: conntest.Codes(56, 0), fallback: connector.FallbackRingFull, fills: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := shmtest.Scope(t)
			c, err := connector.Open(connector.Options{WakeupScope: s, StageID: "0", HostRingBytes: tc.ringBytes, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			receiver := conntest.Open(t, s, connector.Stage(tc.to), tc.ringBytes)
			if tc.setup != nil {
				tc.setup(t, c)
			}
			var wantStats connector.EdgeStats
			wantStats.From, wantStats.To = tc.from, tc.to
			var keys []string
			for i := range tc.puts {
				key := shmtest.Key("reason")
				keys = append(keys, key)
				n, d, err := c.Put(tc.from, tc.to, key, tc.payload)
				if err != nil {
					t.Fatal(err)
				}
				path := connector.PathSegment
				if d.HostRing != nil {
					path = connector.PathRing
					if !tc.ring && (!tc.fills || wantStats.Puts[connector.PathSegment] > 0) {
						t.Fatalf("put %d took the ring: %v", i, d)
					}
				} else {
					if tc.ring {
						t.Fatalf("put %d fell back: %v", i, d)
					}
					wantStats.Fallbacks[tc.fallback]++
				}
				wantStats.Puts[path]++
				wantStats.PutBytes[path] += uint64(n)
			}
			if tc.fills && (wantStats.Puts[connector.PathRing] == 0 || wantStats.Puts[connector.PathSegment] == 0) {
				t.Fatalf("puts %v: want both paths", wantStats.Puts)
			}
			got := edgeStats(t, c, tc.from, tc.to)
			if got.Puts != wantStats.Puts || got.PutBytes != wantStats.PutBytes || got.Fallbacks != wantStats.Fallbacks {
				t.Fatalf("stats %+v\nwant  %+v", got, wantStats)
			}
			var fallbacks uint64
			for _, f := range got.Fallbacks {
				fallbacks += f
			}
			if h := c.Health(); h.HostRingFallbacks != fallbacks || h.HostRingPuts != got.Puts[connector.PathRing] {
				t.Fatalf("health %+v, stats %+v", h, got)
			}
			// The receiver counts its claims by the path they took.
			for _, key := range keys {
				conntest.MustGet(t, receiver, tc.from, tc.to, key, nil)
			}
			r := edgeStats(t, receiver, tc.from, tc.to)
			if r.Gets != wantStats.Puts || r.GetBytes != wantStats.PutBytes {
				t.Fatalf("receiver gets %v bytes %v, want %v %v", r.Gets, r.GetBytes, wantStats.Puts, wantStats.PutBytes)
			}
			if got.PutLatency[connector.PathRing].Count() != 0 || got.PutLatency[connector.PathSegment].Count() != 0 {
				t.Fatalf("latency measured without MeasureLatency: %+v", got.PutLatency)
			}
		})
	}
}

// A connector lists the rings it produces into while it owns them.
func TestStatsListOwnRings(t *testing.T) {
	sender, _ := conntest.Edge(t, ring.MinCapacity)
	d := conntest.MustPut(t, sender, "0", "1", shmtest.Key("own"), conntest.Codes(3, 0))
	conntest.MustPut(t, sender, "0", "2", shmtest.Key("own"), conntest.Codes(3, 0))
	rings := sender.Stats().Rings
	if len(rings) != 2 {
		t.Fatalf("rings %+v, want one per edge", rings)
	}
	found := false
	for _, r := range rings {
		if r.Path == "/dev/shm/"+d.HostRing.Name {
			found = r.From == "0" && r.To == "1"
		}
	}
	if !found {
		t.Fatalf("rings %+v lack %s on 0->1", rings, d.HostRing.Name)
	}
	sender.Close()
	if rings := sender.Stats().Rings; len(rings) != 0 {
		t.Fatalf("after Close: %+v", rings)
	}
}

// With MeasureLatency on, every put is timed by its path and every Recv's
// wait is timed; a Recv in progress counts as a waiter.
func TestStatsLatencyAndWaiters(t *testing.T) {
	sender, receiver := conntest.Edge(t, ring.MinCapacity)
	sender.MeasureLatency(true)
	receiver.MeasureLatency(true)
	if !sender.Stats().LatencyMeasured {
		t.Fatal("LatencyMeasured is false")
	}
	key := shmtest.Key("wait")
	done := make(chan error, 1)
	go func() {
		_, _, err := receiver.Recv(context.Background(), "0", key)
		done <- err
	}()
	waiters := func() int {
		for _, e := range receiver.Stats().Edges {
			if e.From == "0" && e.To == "1" {
				return e.RecvWaiters
			}
		}
		return 0
	}
	shmtest.Eventually(t, 10*time.Second, "one receive waiter", func() bool { return waiters() == 1 })
	// Waiting on the dispatcher: what it delivers from a ring counts as
	// Get's claims do.
	shmtest.Eventually(t, 10*time.Second, "a dispatcher's waiter", func() bool { return receiver.Waiting() == 1 })
	d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 0))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r := edgeStats(t, receiver, "0", "1"); r.Gets[connector.PathRing] != 1 || r.GetBytes[connector.PathRing] != uint64(d.Size) ||
		receiver.Stats().ReceivedBytes() != uint64(d.Size) {
		t.Fatalf("receiver after a dispatched ring claim of %d bytes: gets %v, bytes %v, received %d", d.Size, r.Gets, r.GetBytes, receiver.Stats().ReceivedBytes())
	}
	conntest.MustPut(t, sender, "0", "1", shmtest.Key("big"), conntest.Codes(4096, 0))
	r := edgeStats(t, receiver, "0", "1")
	if r.RecvWaiters != 0 || r.RecvWait.Count() != 1 || r.RecvWait.Sum <= 0 {
		t.Fatalf("receiver: waiters %d, wait %+v", r.RecvWaiters, r.RecvWait)
	}
	s := edgeStats(t, sender, "0", "1")
	for p := range connector.NumPaths {
		if l := s.PutLatency[p]; l.Count() != 1 || l.Sum <= 0 {
			t.Errorf("%v put latency %+v, want one", p, l)
		}
	}
	// A Recv that ends with its context counts no wait.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := receiver.Recv(ctx, "0", shmtest.Key("never")); err == nil {
		t.Fatal("cancelled Recv returned no error")
	}
	if r := edgeStats(t, receiver, "0", "1"); r.RecvWait.Count() != 1 || r.RecvWaiters != 0 {
		t.Fatalf("after a cancelled Recv: %+v", r)
	}
}

// The figures add nothing to what a put and a get allocate, timed or not.
func TestStatsAllocateNothing(t *testing.T) {
	if race.Enabled {
		t.Skip("allocations are not countable under the race detector (sync.Pool drops items)")
	}
	sender, receiver := conntest.Edge(t, ring.DefaultCapacity)
	payload := conntest.Codes(56, 0)
	key := shmtest.Key("alloc")
	pair := func() {
		if _, _, err := sender.Put("0", "1", key, payload); err != nil {
			t.Fatal(err)
		}
		if _, _, ok, err := receiver.Get("0", "1", key, nil); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	pair() // attaches the ring and adds the edge
	untimed := testing.AllocsPerRun(200, pair)
	sender.MeasureLatency(true)
	receiver.MeasureLatency(true)
	if timed := testing.AllocsPerRun(200, pair); timed != untimed {
		t.Fatalf("put+get allocates %v times timed, %v untimed", timed, untimed)
	}
}

// Edges past MaxStatsEdges are counted together, so labels stay bounded.
func TestStatsEdgesBounded(t *testing.T) {
	c := conntest.Open(t, shmtest.Scope(t), "0", connector.NoRing)
	for i := range connector.MaxStatsEdges + 3 {
		key := shmtest.Key("edge")
		conntest.MustPut(t, c, "0", strconv.Itoa(100+i), key, conntest.Codes(1, 0))
		if !c.Cleanup(key) {
			t.Fatalf("cleanup %s retired nothing", key)
		}
	}
	edges := c.Stats().Edges
	if len(edges) != connector.MaxStatsEdges+1 {
		t.Fatalf("%d edges, want %d", len(edges), connector.MaxStatsEdges+1)
	}
	last := edges[len(edges)-1]
	if last.From != "*" || last.To != "*" || last.Puts[connector.PathSegment] != 3 {
		t.Fatalf("overflow edge %+v, want the 3 extra puts", last)
	}
}

// A check of every waited key allocates no list of them, nor of /dev/shm
// however many files it holds (other stages', other tests': here a crowd
// of 500 that nobody waits for): the safety re-polls of idle waiters make
// almost no garbage, so they bring on no collection, which would scan
// every parked waiter's stack.
func TestFullCheckAllocatesNoKeyList(t *testing.T) {
	if race.Enabled {
		t.Skip("allocations are not countable under the race detector (sync.Pool drops items)")
	}
	const n, checks, crowd = 1000, 20, 500
	for range crowd {
		path := filepath.Join(scope.ShmDir, shmtest.Key("crowd"))
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(path) })
	}
	recv, err := connector.Open(connector.Options{WakeupScope: shmtest.Scope(t), StageID: "1", PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range n {
		key := shmtest.Key("idle")
		wg.Go(func() { recv.Recv(ctx, "0", key) })
	}
	waitSettled(t, recv, n)
	// The count is the process's: the least of a few windows, since
	// anything else that runs meanwhile (a loaded machine's wakeups, the
	// runtime) adds to one now and then, while a list made per check
	// would be in every one.
	least := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		start := connector.Dispatched(recv).FullChecks
		runtime.ReadMemStats(&before)
		shmtest.Eventually(t, shmtest.Patience, strconv.Itoa(checks)+" checks of every waited key", func() bool {
			return connector.Dispatched(recv).FullChecks-start >= checks
		})
		runtime.ReadMemStats(&after)
		least = min(least, (after.TotalAlloc-before.TotalAlloc)/uint64(connector.Dispatched(recv).FullChecks-start))
	}
	// A list of the 1000 waited keys alone is 16 KiB, and a listing that
	// made a string per file of the crowd about 32.
	if least > 8<<10 {
		t.Fatalf("%d B allocated per check of every waited key (the least of 3 windows of %d checks)", least, checks)
	}
}
