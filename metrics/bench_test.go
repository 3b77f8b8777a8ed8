//go:build linux

package metrics_test

import (
	"testing"

	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/metrics"
	"omnishm/ring"
)

// BenchmarkPutGetPair is connector's put+get pair ({"codes": int64[56]} on
// the ring, in one process) without and with a Collector on both ends: the
// difference is what the collector's latency histograms cost (two
// monotonic clock reads and a few atomic adds per put). The per-edge
// counters are counted in both.
func BenchmarkPutGetPair(b *testing.B) {
	for _, c := range []struct {
		name    string
		collect bool
	}{{"bare", false}, {"collector", true}} {
		b.Run(c.name, func(b *testing.B) {
			s := shmtest.Scope(b)
			sender, receiver := conntest.Open(b, s, "0", ring.DefaultCapacity), conntest.Open(b, s, "1", ring.DefaultCapacity)
			if c.collect {
				metrics.NewCollector(sender)
				metrics.NewCollector(receiver)
			}
			conntest.PutGetLoop(b, sender, receiver, shmtest.Key("pair"), conntest.Codes(56, 0))
		})
	}
}
