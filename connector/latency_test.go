//go:build linux

package connector

import (
	"testing"
	"time"
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
