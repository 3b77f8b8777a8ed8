//go:build linux

package connector

import (
	"context"
	"testing"
	"time"

	"omnishm/internal/shmtest"
)

// A duration lands in the first bucket whose bound it does not exceed.
func TestLatencyBuckets(t *testing.T) {
	cases := []struct {
		d      time.Duration
		bucket int
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Microsecond, 0},
		{time.Microsecond + 1, 1},
		{2 * time.Microsecond, 1},
		{2*time.Microsecond + 1, 2},
		{3 * time.Microsecond, 2},
		{LatencyBound(10), 10},
		{LatencyBound(LatencyBuckets - 1), LatencyBuckets - 1},
		{LatencyBound(LatencyBuckets-1) + 1, LatencyBuckets},
		{time.Hour, LatencyBuckets},
	}
	for _, c := range cases {
		var l latency
		l.observe(c.d)
		s := l.snapshot()
		if s.Counts[c.bucket] != 1 || s.Count() != 1 {
			t.Errorf("%v: counts %v, want bucket %d", c.d, s.Counts, c.bucket)
		}
		if s.Sum != max(c.d, 0) {
			t.Errorf("%v: sum %v", c.d, s.Sum)
		}
	}
}

// BenchmarkStatsHooks is what the figures add to one put+get pair: the
// hooks Put and Get call (edge lookup, atomic adds), untimed and with
// MeasureLatency on (two monotonic clock reads and a histogram add).
func BenchmarkStatsHooks(b *testing.B) {
	for _, timed := range []bool{false, true} {
		name := "untimed"
		if timed {
			name = "timed"
		}
		b.Run(name, func(b *testing.B) {
			var s stats
			s.timing.Store(timed)
			s.edge("0", "2") // another edge before ours: a two-entry scan
			b.ReportAllocs()
			for b.Loop() {
				start := s.start()
				s.put("0", "1", PathRing, 448, start)
				s.got("0", "1", PathRing, 448)
			}
		})
	}
}

// A spin that found nothing yields the CPU once and looks again before
// Recv sleeps: a producer that waited for the receiver's CPU puts during
// that yield (here the put is the yield's stand-in), and the message is
// read there, with no dispatcher, sleep or wakeup. With PollInterval at an
// hour and the put made only by the yield, nothing else could deliver it.
func TestSpinYieldsOnceThenLooks(t *testing.T) {
	sc := shmtest.Scope(t)
	send, err := Open(Options{WakeupScope: sc, StageID: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	recv, err := Open(Options{WakeupScope: sc, StageID: "1", Spin: time.Millisecond, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), shmtest.Patience)
	defer cancel()
	// The edge's ring exists and is attached before the spin.
	first := shmtest.Key("first")
	if _, _, err := send.Put("0", "1", first, "first"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := recv.Recv(ctx, "0", first); err != nil {
		t.Fatal(err)
	}
	key, yields := shmtest.Key("late"), 0
	recv.spinYield = func() {
		if yields++; yields == 1 {
			if _, _, err := send.Put("0", "1", key, "late"); err != nil {
				t.Error(err)
			}
		}
	}
	got, _, err := recv.Recv(ctx, "0", key)
	if err != nil || got != "late" {
		t.Fatalf("Recv: %v, %v", got, err)
	}
	if yields != 1 {
		t.Errorf("the spin yielded %d times, want once", yields)
	}
	if recv.dispatcher.Load() != nil {
		t.Error("the message was left to the dispatcher: Recv slept")
	}
}
