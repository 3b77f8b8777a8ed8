//go:build linux

package connector_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/frame"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/scope"
	"omnishm/tensor"
	"omnishm/wire"
)

func TestFallbackMissWhileLockHeldThenClaim(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	key := shmtest.Key("fallback-claim")
	big := conntest.Codes(4096, 0)["codes"]
	d := conntest.MustPut(t, sender, "0", "1", key, big)
	if d.Shm == nil {
		t.Fatalf("a 32 KiB tensor took %v on a 4 KiB ring", d)
	}
	holder := shmtest.HoldLock(t, scope.Path(scope.LockName(key)))
	conntest.Missing(t, receiver, "0", "1", key, nil)
	holder.Release(t)
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[4095] != 4095 {
		t.Fatalf("got %v", got[4095])
	}
	conntest.Missing(t, receiver, "0", "1", key, &d)
	if _, err := os.Stat(scope.Path(scope.LockName(key))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file left behind: %v", err)
	}
}

func TestFullRingAndLargeFrameUseExistingShm(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	ring, shm := 0, 0
	for i := range 12 {
		d := conntest.MustPut(t, sender, "0", "1", "full"+strconv.Itoa(i), conntest.Codes(56, 0))
		if d.HostRing != nil {
			ring++
		} else {
			shm++
		}
	}
	if ring == 0 || shm == 0 {
		t.Fatalf("ring=%d shm=%d: want both paths used", ring, shm)
	}
	for i := 11; i >= 0; i-- {
		got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "full"+strconv.Itoa(i), nil))
		if got[55] != 55 {
			t.Fatalf("full%d: %v", i, got)
		}
	}
	d := conntest.MustPut(t, sender, "0", "1", "large", conntest.Codes(4096, 0)["codes"])
	if d.Shm == nil {
		t.Fatalf("large took %v", d)
	}
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", "large", &d)); got[4095] != 4095 {
		t.Fatal("large differs")
	}
	if d := conntest.MustPut(t, sender, "0", "1", "recovered", conntest.Codes(56, 0)); d.HostRing == nil {
		t.Fatalf("ring did not recover: %v", d)
	}
	conntest.MustGet(t, receiver, "0", "1", "recovered", nil)
	h := sender.Health()
	if h.Puts != 14 || h.HostRingPuts != uint64(ring+1) || h.HostRingFallbacks != uint64(shm+1) {
		t.Fatalf("health %+v", h)
	}
}

func TestReputAcrossRingAndFallbackAndStaleDescriptor(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	key := shmtest.Key("reuse")
	one := func(v int64) *tensor.Tensor { t, _ := tensor.FromSlice([]int64{v}); return t }
	full := func(v int64) *tensor.Tensor {
		vals := make([]int64, 4096)
		for i := range vals {
			vals[i] = v
		}
		t, _ := tensor.FromSlice(vals)
		return t
	}
	old := conntest.MustPut(t, sender, "0", "1", key, one(11))
	current := conntest.MustPut(t, sender, "0", "1", key, one(22))
	conntest.Missing(t, receiver, "0", "1", key, &old)
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", key, &current)); got[0] != 22 {
		t.Fatalf("got %v", got)
	}
	conntest.MustPut(t, sender, "0", "1", key, one(33))
	conntest.MustPut(t, sender, "0", "1", key, full(44))
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[0] != 44 {
		t.Fatalf("got %v, want the per-key version 44", got[0])
	}
	conntest.MustPut(t, sender, "0", "1", key, full(55))
	conntest.MustPut(t, sender, "0", "1", key, one(66))
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); len(got) != 1 || got[0] != 66 {
		t.Fatalf("got %v, want the ring version 66", got)
	}
	if _, err := os.Stat(scope.Path(key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("replaced segment left behind: %v", err)
	}
	conntest.Missing(t, receiver, "0", "1", key, nil)
}

func TestDisabledRingAndFalsePayload(t *testing.T) {
	s := shmtest.Scope(t)
	legacy := conntest.Open(t, s, "0", connector.NoRing)
	receiver := conntest.Open(t, s, "1", 4096)
	d := conntest.MustPut(t, legacy, "0", "1", shmtest.Key("legacy"), conntest.Codes(3, 0))
	if d.Shm == nil {
		t.Fatalf("disabled ring used %v", d)
	}
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", d.Shm.Name, &d)); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("got %v", got)
	}
	sender := conntest.Open(t, s, "0", 4096)
	if d := conntest.MustPut(t, sender, "0", "1", "falsey", false); d.HostRing == nil {
		t.Fatalf("false took %v", d)
	}
	if v := conntest.MustGet(t, receiver, "0", "1", "falsey", nil); v != false {
		t.Fatalf("got %#v", v)
	}
}

func TestDescriptorMapForm(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	d := conntest.MustPut(t, sender, "0", "1", "mapped", conntest.Codes(3, 7))
	wrapped := `{"mapped": ` + d.String() + `}`
	pd, err := descriptor.Parse([]byte(wrapped), "mapped")
	if err != nil || pd.HostRing == nil || pd.HostRing.Position != d.HostRing.Position {
		t.Fatalf("parse %s: %+v %v", wrapped, pd, err)
	}
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "mapped", pd)); got[0] != 7 {
		t.Fatal("wrong value")
	}
}

// A tensor tree whose frame is too large for the ring but whose plain form
// fits goes through the ring as kind-0 bytes, as the seed does (SPEC §9).
func TestPlainFormTakesTheRingWhenTheFrameDoesNotFit(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	key := "plain-fits"
	limit := connector.RingMaxPayload(sender, key)
	var payload map[string]any
	for n := 1; n < 256 && payload == nil; n++ {
		p := conntest.Codes(n, 0)
		_, ferr := frame.Prepare(p, limit)
		plain, _ := wire.Marshal(p)
		if errors.Is(ferr, frame.ErrTooLarge) && len(plain) <= limit {
			payload = p
		}
	}
	if payload == nil {
		t.Fatal("no tensor size between the frame limit and the plain limit")
	}
	d := conntest.MustPut(t, sender, "0", "1", key, payload)
	if d.HostRing == nil {
		t.Fatalf("took %v, want the ring", d)
	}
	got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, &d))
	want := conntest.Int64s(t, payload["codes"])
	if !slices.Equal(got, want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
}

// A ring descriptor reads only its publication (SPEC §9): once a per-key
// put has replaced it, the descriptor misses even though a segment of the
// key is there, and a get without a descriptor takes the segment.
func TestRingDescriptorNeverFallsBackToTheSegment(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	key := shmtest.Key("only-ring")
	small := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 1))
	if small.HostRing == nil {
		t.Fatalf("took %v", small)
	}
	if d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(4096, 2)); d.Shm == nil {
		t.Fatalf("took %v", d)
	}
	conntest.Missing(t, receiver, "0", "1", key, &small)
	if _, err := os.Stat(scope.Path(key)); err != nil {
		t.Fatalf("the descriptor's miss touched the segment: %v", err)
	}
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[0] != 2 {
		t.Fatalf("got %v", got[0])
	}
}

// connector.Health counts both paths on both ends (SPEC §9): puts, gets, bytes and
// the ring's share.
func TestHealthCountsBothPaths(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	small, big := shmtest.Key("small"), shmtest.Key("big")
	n1, d1, err := sender.Put("0", "1", small, conntest.Codes(3, 0))
	if err != nil || d1.HostRing == nil {
		t.Fatalf("put: %v %v", d1, err)
	}
	n2, d2, err := sender.Put("0", "1", big, conntest.Codes(4096, 0))
	if err != nil || d2.Shm == nil {
		t.Fatalf("put: %v %v", d2, err)
	}
	conntest.MustGet(t, receiver, "0", "1", small, nil)
	conntest.MustGet(t, receiver, "0", "1", big, nil)
	conntest.Missing(t, receiver, "0", "1", big, nil)
	want := connector.Health{Puts: 2, BytesTransferred: uint64(n1 + n2), HostRingPuts: 1, HostRingFallbacks: 1}
	if h := sender.Health(); h != want {
		t.Fatalf("sender health %+v, want %+v", h, want)
	}
	if h := receiver.Health(); h != (connector.Health{Gets: 2, HostRingGets: 1}) {
		t.Fatalf("receiver health %+v", h)
	}
}

// A tensor-free payload goes into the ring as its kind-0 bytes; one too
// large for the ring, or refused by a full ring, reaches the receiver
// through the per-key path with the same bytes.
func TestTensorFreePayloadOnBothPaths(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	ids := func(n int) []any {
		l := make([]any, n)
		for i := range l {
			l[i] = int64(i * 1000)
		}
		return l
	}
	for _, c := range []struct {
		n    int
		ring bool
	}{{10, true}, {2000, false}} {
		key := shmtest.Key("ids")
		d := conntest.MustPut(t, sender, "0", "1", key, map[string]any{"ids": ids(c.n)})
		if (d.HostRing != nil) != c.ring {
			t.Fatalf("%d ids took %v", c.n, d)
		}
		got := conntest.MustGet(t, receiver, "0", "1", key, &d).(map[string]any)["ids"].([]any)
		if len(got) != c.n || got[c.n-1] != int64((c.n-1)*1000) {
			t.Fatalf("%d ids: got %d, last %v", c.n, len(got), got[len(got)-1])
		}
	}
	// Fill the ring with unclaimed frames: the next small payload falls back.
	var refused *connector.Descriptor
	for i := 0; i < 64 && refused == nil; i++ {
		d := conntest.MustPut(t, sender, "0", "1", shmtest.Key("fill"), map[string]any{"ids": ids(100)})
		if d.Shm != nil {
			refused = &d
		}
	}
	if refused == nil {
		t.Fatal("the ring never filled")
	}
	got := conntest.MustGet(t, receiver, "0", "1", refused.Shm.Name, refused).(map[string]any)["ids"].([]any)
	if len(got) != 100 || got[99] != int64(99000) {
		t.Fatalf("fallback payload: %d ids", len(got))
	}
}

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
	sender, err := connector.Open(connector.Options{WakeupScope: s, StageID: "0", HostRingBytes: 4096, Logger: slog.New(warns)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sender.Close() })
	receiver := conntest.Open(t, s, "1", 4096)
	registry := sender.Names().RingDir()
	if err := os.WriteFile(registry, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(registry) })
	for i := range 2 {
		key := shmtest.Key("no-ring")
		if d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, int64(i))); d.Shm == nil {
			t.Fatalf("put %d took %v, want the per-key path", i, d)
		}
		if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[0] != int64(i) {
			t.Fatalf("got %v", got)
		}
	}
	if n := warns.n.Load(); n != 1 {
		t.Fatalf("%d warnings, want one for the edge", n)
	}
	if h := sender.Health(); h.HostRingPuts != 0 || h.HostRingFallbacks != 2 {
		t.Fatalf("health %+v", h)
	}
	if left, _ := filepath.Glob(scope.Path(sender.Names().RingPrefix()) + "*"); len(left) != 0 {
		t.Fatalf("the failed setup left %v", left)
	}
}
