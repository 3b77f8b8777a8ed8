//go:build linux

package bench

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/config"
	"omnishm/internal/shmtest"
)

func TestMain(m *testing.M) { shmtest.Main(m, nil) }

// plan is a small plan in a scope and key space of the test's own.
func plan(t *testing.T, mode Mode, count int, transports ...string) Plan {
	payloads, err := TensorPayloads([]int{512, 2048})
	if err != nil {
		t.Fatal(err)
	}
	return Plan{Mode: mode, Payloads: payloads, Transports: transports, Count: count,
		Scope: shmtest.Scope(t), KeyPrefix: shmtest.Key("bench") + "_"}
}

func transports(rs []Result) []string {
	return shmtest.Map(rs, func(r Result) string { return r.Transport })
}

func TestRunPair(t *testing.T) {
	p := plan(t, Pair, 4, Ring, UDS)
	p.RingBytes = 4096 // a 2 KiB tensor's frame is over a quarter of it: it goes per-key
	var calls, results int
	p.Progress = func(pr Progress) {
		if pr.Result != nil {
			results++
			return
		}
		calls++
		if pr.Done != calls || pr.Total != 3*2*(4+4) {
			t.Errorf("progress %+v after %d messages", pr, calls)
		}
	}
	r, err := Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ring", "ring->perkey", "uds", "uds", "memcpy", "memcpy"}; !slices.Equal(transports(r.Results), want) || r.Mode != "pair" {
		t.Fatalf("report %+v, want transports %v", r, want)
	}
	if r.Results[0].Fallbacks != 0 || r.Results[1].Fallbacks != 4 {
		t.Errorf("fallbacks %d, %d; want 0, 4", r.Results[0].Fallbacks, r.Results[1].Fallbacks)
	}
	if r.Flock == nil || r.Flock.Transport != Flock || r.Flock.Count != 4 || r.Flock.P50Us <= 0 {
		t.Fatalf("flock floor %+v", r.Flock)
	}
	for i, x := range r.Results {
		floor := x.Transport == Memcpy
		if x.Count != 4 || x.P50Us <= 0 || x.VsUDS != nil || (x.FlockRatio == nil) != floor || (x.FloorRatio == nil) != floor {
			t.Errorf("result %d %+v", i, x)
			continue
		}
		// Each pair's ratios are to the floor timed between its samples.
		if !floor && (x.FlockUs <= 0 || *x.FlockRatio != x.P50Us/x.FlockUs || *x.FloorRatio >= *x.FlockRatio) {
			t.Errorf("result %d floor %v µs, ratios %v, %v", i, x.FlockUs, *x.FlockRatio, *x.FloorRatio)
		}
		if floor && x.FlockUs != 0 {
			t.Errorf("floor row %d has a floor of its own: %v µs", i, x.FlockUs)
		}
	}
	if calls != 48 || results != 6 {
		t.Errorf("%d progress calls and %d results, want 48 and 6", calls, results)
	}
}

func TestRunLatency(t *testing.T) {
	r, err := Run(context.Background(), plan(t, Latency, 3, Ring, PerKey, UDS))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ring", "ring", "perkey", "perkey", "uds", "uds", "memcpy", "memcpy", "shmfile", "shmfile"}; !slices.Equal(transports(r.Results), want) {
		t.Fatalf("transports %v, want %v", transports(r.Results), want)
	}
	for _, x := range r.Results {
		if isFloor(x) {
			if x.VsUDS != nil || x.Count != 3 || x.SendUs != 0 {
				t.Errorf("floor row %+v", x)
			}
			continue
		}
		if x.Count != 3 || x.VsUDS == nil || *x.VsUDS <= 0 || (x.Transport == UDS && *x.VsUDS != 1) || x.SendUs <= 0 {
			t.Errorf("result %+v", x)
		}
	}
	if r.Flock != nil || r.Fanout != nil {
		t.Errorf("latency report with a flock floor or fanout: %+v", r)
	}
}

// TestRunLatencyPinned pins the two processes of a latency run to two
// CPUs and gives this process its CPUs back after the run.
func TestRunLatencyPinned(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	p := plan(t, Latency, 3, Ring, UDS)
	p.Pin = true
	r, err := Run(context.Background(), p)
	if before.Count() < 2 {
		if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), "pin needs two CPUs") {
			t.Fatalf("pinned run on %d CPU: %v, want ErrPlan saying so", before.Count(), err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Pinned) != 2 || r.Pinned[0] == r.Pinned[1] || !before.IsSet(r.Pinned[0]) || !before.IsSet(r.Pinned[1]) {
		t.Errorf("pinned to %v, want two distinct CPUs of %d", r.Pinned, before.Count())
	}
	var out strings.Builder
	if err := r.WriteTable(&out); err != nil || !strings.Contains(out.String(), "pinned: this process on CPU ") {
		t.Errorf("table without the pinned line (%v):\n%s", err, out.String())
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil || after != before {
		t.Errorf("after the run this thread may run on %d CPUs (%v), before on %d", after.Count(), err, before.Count())
	}
}

// TestRunStream streams a few hundred messages per cell through the
// receiver process, with a window small enough to be waited on; Run fails
// unless every message arrived exactly once.
func TestRunStream(t *testing.T) {
	p := plan(t, Stream, 300, Ring, PerKey, UDS)
	p.Window = 16
	r, err := Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ring", "ring", "perkey", "perkey", "uds", "uds", "memcpy", "memcpy"}
	if !slices.Equal(transports(r.Results), want) || r.Mode != "stream" {
		t.Fatalf("transports %v, want %v", transports(r.Results), want)
	}
	for _, x := range r.Results {
		if x.Transport == Memcpy {
			if x.Window != 0 || x.VsUDS != nil {
				t.Errorf("floor row %+v", x)
			}
			continue
		}
		if x.Count != 300 || x.Window != 16 || x.MsgsPerS <= 0 || x.BytesPerS != x.MsgsPerS*float64(x.Size) ||
			x.P50Us <= 0 || x.P99Us < x.P50Us || x.VsUDS == nil || (x.Transport == UDS && *x.VsUDS != 1) {
			t.Errorf("result %+v", x)
		}
	}
}

// TestRunLarge: 16 MiB payloads stream and time one by one; with the
// largest ring they still go per-key (over a quarter of it), and the
// report says so.
func TestRunLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("moves a few hundred MiB")
	}
	payloads, err := TensorPayloads([]int{16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{Stream, Latency} {
		p := Plan{Mode: mode, Payloads: payloads, Transports: []string{Ring, UDS}, Count: 3, Warmup: 1,
			RingBytes: 64 << 20, Scope: shmtest.Scope(t), KeyPrefix: shmtest.Key("bench") + "_"}
		r, err := Run(context.Background(), p)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if want := []string{"ring->perkey", "uds", "memcpy"}; !slices.Equal(transports(r.Results), want) {
			t.Errorf("%s: transports %v, want %v", mode, transports(r.Results), want)
		}
		if mode == Stream && r.Results[0].Window != 4 { // 64 MiB in flight at most
			t.Errorf("stream window %d, want 4", r.Results[0].Window)
		}
	}
}

// TestRunFanout blocks a few waiters of each kind on each transport in
// the receiver process and delivers to them one by one.
func TestRunFanout(t *testing.T) {
	payloads, err := TensorPayloads([]int{512})
	if err != nil {
		t.Fatal(err)
	}
	p := Plan{Mode: Fanout, Payloads: payloads, Waiters: 4, Idle: 20 * time.Millisecond,
		Scope: shmtest.Scope(t), KeyPrefix: shmtest.Key("bench") + "_"}
	var done int
	p.Progress = func(pr Progress) {
		if pr.Fanout == nil {
			done++
		}
		if pr.Total != 2*2*4 || pr.WaitIn == "" {
			t.Errorf("progress %+v", pr)
		}
	}
	r, err := Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ transport, waitIn string }
	var got []row
	for _, x := range r.Fanout {
		got = append(got, row{x.Transport, x.WaitIn})
		if x.Waiters != 4 || x.Size != 512 || x.IdleS <= 0 || x.IdleCPUPct < 0 || x.Threads < 1 || x.CPUPerMsgUs < 0 || x.FlockPairs == nil {
			t.Errorf("fanout %+v", x)
		}
		// The GC figures cross from the receiver as two numbers of their
		// own: a cycle counted means GC time counted, and no window of
		// PipedRounds*Waiters deliveries runs more cycles than deliveries.
		if x.PipedRounds != maxPipedRounds || x.PipedGCPerMsgUs < 0 || x.PipedGCCycles < 0 ||
			x.PipedGCCycles > 0 && x.PipedGCPerMsgUs == 0 || x.PipedGCCycles > x.PipedRounds*x.Waiters {
			t.Errorf("fanout's pipelined rounds %+v", x)
		}
		// So do the allocations: a delivery allocates at least the payload
		// it hands over, in at least one object, and no object is smaller
		// than a byte.
		if x.PipedAllocBytesPerMsg < float64(x.Size) || x.PipedAllocsPerMsg < 1 || x.PipedAllocBytesPerMsg < x.PipedAllocsPerMsg {
			t.Errorf("fanout's pipelined allocations: %.0f B, %.1f objects per delivery of %d B", x.PipedAllocBytesPerMsg, x.PipedAllocsPerMsg, x.Size)
		}
	}
	want := []row{{"ring", "recv"}, {"ring", "reader"}, {"perkey", "recv"}, {"perkey", "reader"}}
	if !slices.Equal(got, want) || len(r.Results) != 0 || r.Flock == nil || done != 16 {
		t.Fatalf("fanout rows %v, want %v; results %v, flock %v, %d deliveries", got, want, r.Results, r.Flock, done)
	}
}

// sink keeps TestReadGC's allocation on the heap.
var sink []byte

// readGC counts a collection and an allocation, and does not run back.
func TestReadGC(t *testing.T) {
	before := readGC()
	sink = make([]byte, 1<<20)
	runtime.GC()
	after := readGC()
	if after.cycles <= before.cycles || after.cpu < before.cpu || after.cpu == 0 {
		t.Fatalf("GC totals %+v, then %+v after a collection", before, after)
	}
	if after.allocBytes < before.allocBytes+1<<20 || after.allocs <= before.allocs {
		t.Fatalf("allocations %d B in %d objects, then %d B in %d after a 1 MiB one", before.allocBytes, before.allocs, after.allocBytes, after.allocs)
	}
}

// TestRunInterrupted: a run whose context ends stops its receiver process,
// which cleans up (Main checks the scope is empty), and returns ctx's error.
func TestRunInterrupted(t *testing.T) {
	fanout := plan(t, Fanout, 0, Ring)
	fanout.Waiters, fanout.Idle = 50, time.Millisecond
	for _, p := range []Plan{plan(t, Latency, 1000000, Ring), plan(t, Stream, 1000000, Ring), fanout} {
		ctx, cancel := context.WithCancel(context.Background())
		p.Progress = func(pr Progress) {
			if pr.Done == 5 {
				cancel()
			}
		}
		if _, err := Run(ctx, p); !errors.Is(err, context.Canceled) {
			t.Errorf("interrupted %s run: %v", p.Mode, err)
		}
		cancel()
	}
}

func TestRunBadPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan Plan
		want string
	}{
		{"mode", Plan{Mode: "burst"}, `unknown mode "burst"`},
		{"transport", Plan{Transports: []string{"tcp"}}, `unknown transport "tcp"`},
		{"twice", Plan{Transports: []string{Ring, Ring}}, `"ring" given twice`},
		{"count", Plan{Count: -1}, "count -1"},
		{"payload value", Plan{Payloads: []Payload{{Value: make(chan int)}}}, "payload 0"},
		{"window", Plan{Mode: Stream, Window: -1}, "window -1"},
		{"window outside stream", Plan{Mode: Pair, Window: 8}, "a window is for stream mode"},
		{"waiters", Plan{Mode: Fanout, Waiters: -1}, "-1 waiters"},
		{"too many waiters", Plan{Mode: Fanout, Waiters: maxWaiters + 1}, "10001 waiters"},
		{"waiters outside fanout", Plan{Waiters: 3}, "waiters is for fanout mode"},
		{"wait-in outside fanout", Plan{Mode: Stream, WaitIn: []string{WaitRecv}}, "wait-in is for fanout mode"},
		{"idle outside fanout", Plan{Idle: time.Second}, "an idle window is for fanout mode"},
		{"idle", Plan{Mode: Fanout, Idle: -time.Second}, "idle window -1s"},
		{"fanout count", Plan{Mode: Fanout, Count: 10}, "no count"},
		{"pin without a receiver", Plan{Mode: Pair, Pin: true}, "pin is for the modes with a receiver process, not pair"},
		{"fanout uds", Plan{Mode: Fanout, Transports: []string{UDS}}, `fanout mode cannot time transport "uds"`},
		{"nats settings without nats", Plan{Transports: []string{Ring}, Nats: config.Nats{URL: "nats://127.0.0.1:1"}}, "nats is not among"},
		{"wait-in", Plan{Mode: Fanout, WaitIn: []string{"poll"}}, `unknown wait-in "poll"`},
		{"wait-in twice", Plan{Mode: Fanout, WaitIn: []string{WaitRecv, WaitRecv}}, `"recv" given twice`},
		{"reader chunk", Plan{Mode: Fanout, Payloads: []Payload{{Value: int64(7)}}}, "chunks, which are maps"},
		{"recv needs no map", Plan{Mode: Fanout, WaitIn: []string{WaitRecv}, Payloads: []Payload{{Value: make(chan int)}}}, "payload 0"},
	} {
		_, err := Run(context.Background(), tc.plan)
		if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrPlan saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := TensorPayloads([]int{3}); err == nil {
		t.Error("a 3-byte float32 tensor")
	}
}

// TestPlanDefaults: what a plan's zero fields become, per mode.
func TestPlanDefaults(t *testing.T) {
	for _, tc := range []struct {
		plan       Plan
		transports []string
		sizes      []int
		counts     []int
	}{
		{Plan{}, Transports(), defaultSizes, []int{1000, 1000, 1000, 1000}},
		{Plan{Mode: Stream}, Transports(), defaultSizes, []int{20000, 20000, 4096, 256}},
		{Plan{Mode: Stream, Count: 7}, Transports(), defaultSizes, []int{7, 7, 7, 7}},
		{Plan{Mode: Fanout}, []string{Ring, PerKey}, []int{512}, []int{defaultWaiters}},
	} {
		p, forms, err := tc.plan.resolve()
		if err != nil {
			t.Fatal(err)
		}
		r := runner{plan: p, mode: modes[p.Mode], forms: forms}
		var sizes, counts []int
		for _, c := range r.cells()[:len(p.Payloads)] {
			sizes, counts = append(sizes, c.payload.Size), append(counts, c.count)
		}
		if !slices.Equal(p.Transports, tc.transports) || !slices.Equal(sizes, tc.sizes) || !slices.Equal(counts, tc.counts) {
			t.Errorf("%s: transports %v, sizes %v, counts %v", p.Mode, p.Transports, sizes, counts)
		}
		if p.Mode == Fanout && (p.Idle != defaultIdle || !slices.Equal(p.WaitIn, WaitKinds())) {
			t.Errorf("fanout defaults %+v", p)
		}
	}
}

func TestStreamWindow(t *testing.T) {
	for _, tc := range []struct {
		plan Plan
		size int
		want int
	}{
		{Plan{Window: 256, RingBytes: 4 << 20, Transports: Transports()}, 512, 256},
		{Plan{Window: 256, RingBytes: 64 << 20, Transports: Transports()}, 1 << 20, 31},  // half the ring
		{Plan{Window: 256, RingBytes: 64 << 20, Transports: []string{UDS}}, 1 << 20, 64}, // 64 MiB in flight
		{Plan{Window: 256, RingBytes: 4 << 20, Transports: Transports()}, 1 << 20, 64},   // per-key: no ring bound
		{Plan{Window: 256, RingBytes: 64 << 20, Transports: Transports()}, 16 << 20, 4},
		{Plan{Window: 256, RingBytes: 4 << 20, Transports: Transports()}, 1 << 30, 1},
		{Plan{Window: 3, RingBytes: 4 << 20, Transports: Transports()}, 512, 3},
	} {
		if got := tc.plan.window(tc.size); got != tc.want {
			t.Errorf("window of %s over %v with a %s ring: %d, want %d", FormatSize(tc.size), tc.plan.Transports, FormatSize(tc.plan.RingBytes), got, tc.want)
		}
	}
}

// TestRunNats times the nats transport in each mode that can, over the
// server Run starts for the plan, beside the socket; stream fails unless
// every message arrived exactly once.
func TestRunNats(t *testing.T) {
	for _, mode := range []Mode{Latency, Pair, Stream} {
		t.Run(string(mode), func(t *testing.T) {
			count := 3
			if mode == Stream {
				count = 40
			}
			p := plan(t, mode, count, Nats, UDS)
			if mode == Stream {
				p.Window = 8
			}
			r, err := Run(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"nats", "nats", "uds", "uds", "memcpy", "memcpy"}; !slices.Equal(transports(r.Results), want) {
				t.Fatalf("transports %v, want %v", transports(r.Results), want)
			}
			for _, x := range r.Results[:2] {
				if x.Count != count || x.P50Us <= 0 || (mode != Pair) != (x.VsUDS != nil) || x.FlockRatio != nil || x.FloorRatio != nil {
					t.Errorf("nats result %+v", x)
				}
			}
			if mode == Pair && r.Results[2].FlockRatio == nil {
				t.Errorf("uds pair without its flock ratio: %+v", r.Results[2])
			}
		})
	}
}

func TestRunNatsRefusedByFanout(t *testing.T) {
	_, err := Run(context.Background(), Plan{Mode: Fanout, Transports: []string{Nats}})
	if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), `cannot time transport "nats"`) {
		t.Fatalf("fanout over nats: %v", err)
	}
}
