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
