package bench

import (
	"context"
	"errors"
	"slices"
	"testing"

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
	var out []string
	for _, r := range rs {
		out = append(out, r.Transport)
	}
	return out
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
		if pr.Done != calls || pr.Total != 2*2*(4+4) {
			t.Errorf("progress %+v after %d messages", pr, calls)
		}
	}
	r, err := Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ring", "ring->perkey", "uds", "uds"}; !slices.Equal(transports(r.Results), want) || r.Mode != "pair" {
		t.Fatalf("report %+v, want transports %v", r, want)
	}
	if r.Results[0].Fallbacks != 0 || r.Results[1].Fallbacks != 4 {
		t.Errorf("fallbacks %d, %d; want 0, 4", r.Results[0].Fallbacks, r.Results[1].Fallbacks)
	}
	for _, x := range r.Results {
		if x.Count != 4 || x.P50Us <= 0 || x.VsUDS != nil {
			t.Errorf("result %+v", x)
		}
	}
	if calls != 32 || results != 4 {
		t.Errorf("%d progress calls and %d results, want 32 and 4", calls, results)
	}
}

func TestRunLatency(t *testing.T) {
	r, err := Run(context.Background(), plan(t, Latency, 3, Ring, PerKey, UDS))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ring", "ring", "perkey", "perkey", "uds", "uds"}; !slices.Equal(transports(r.Results), want) {
		t.Fatalf("transports %v, want %v", transports(r.Results), want)
	}
	for _, x := range r.Results {
		if x.Count != 3 || x.VsUDS == nil || *x.VsUDS <= 0 || (x.Transport == UDS && *x.VsUDS != 1) {
			t.Errorf("result %+v", x)
		}
	}
}

// TestRunInterrupted: a run whose context ends stops its receiver process,
// which cleans up (Main checks the scope is empty), and returns ctx's error.
func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := plan(t, Latency, 1000000, Ring)
	p.Progress = func(pr Progress) {
		if pr.Done == 5 {
			cancel()
		}
	}
	if _, err := Run(ctx, p); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
}

func TestRunBadPlan(t *testing.T) {
	for name, p := range map[string]Plan{
		"mode":          {Mode: "burst"},
		"transport":     {Transports: []string{"tcp"}},
		"twice":         {Transports: []string{Ring, Ring}},
		"count":         {Count: -1},
		"payload value": {Payloads: []Payload{{Value: make(chan int)}}},
	} {
		if _, err := Run(context.Background(), p); !errors.Is(err, ErrPlan) {
			t.Errorf("%s: %v, want ErrPlan", name, err)
		}
	}
	if _, err := TensorPayloads([]int{3}); err == nil {
		t.Error("a 3-byte float32 tensor")
	}
}
