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
	for _, collect := range []bool{false, true} {
		name := "bare"
		if collect {
			name = "collector"
		}
		b.Run(name, func(b *testing.B) {
			s := shmtest.Scope(b)
			sender, receiver := conntest.Open(b, s, "0", ring.DefaultCapacity), conntest.Open(b, s, "1", ring.DefaultCapacity)
			if collect {
				metrics.NewCollector(sender)
				metrics.NewCollector(receiver)
			}
			payload := conntest.Codes(56, 0)
			key := shmtest.Key("pair")
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := sender.Put("0", "1", key, payload); err != nil {
					b.Fatal(err)
				}
				if _, _, ok, err := receiver.Get("0", "1", key, nil); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
