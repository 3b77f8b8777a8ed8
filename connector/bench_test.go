//go:build linux

package connector_test

import (
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
)

// BenchmarkPutGetPair is the transport's CPU cost: one put and one get of
// {"codes": int64[56]} in one process (SPEC target: under 2 µs on the ring).
// "ring-plain" is a tensor-free payload (64 token ids): kind-0 bytes.
func BenchmarkPutGetPair(b *testing.B) {
	ids := make([]any, 64)
	for i := range ids {
		ids[i] = int64(i * 1000)
	}
	for _, tc := range []struct {
		name      string
		ringBytes int
		payload   any
	}{{"ring", ring.DefaultCapacity, conntest.Codes(56, 0)}, {"ring-plain", ring.DefaultCapacity, map[string]any{"ids": ids}}, {"perkey", connector.NoRing, conntest.Codes(56, 0)}} {
		b.Run(tc.name, func(b *testing.B) {
			s := shmtest.Scope(b)
			c := conntest.Open(b, s, "1", tc.ringBytes)
			payload := tc.payload
			key := shmtest.Key("pair")
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := c.Put("0", "1", key, payload); err != nil {
					b.Fatal(err)
				}
				if _, _, ok, err := c.Get("0", "1", key, nil); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkGetMiss is an empty poll of an edge with an attached ring: the
// ring part takes no lock, scan or syscall; the per-key check is one stat.
func BenchmarkGetMiss(b *testing.B) {
	s := shmtest.Scope(b)
	sender, receiver := conntest.Open(b, s, "0", ring.DefaultCapacity), conntest.Open(b, s, "1", ring.DefaultCapacity)
	if _, _, err := sender.Put("0", "1", "prime", conntest.Codes(3, 0)); err != nil {
		b.Fatal(err)
	}
	if _, _, ok, _ := receiver.Get("0", "1", "prime", nil); !ok {
		b.Fatal("prime not received")
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok, err := receiver.Get("0", "1", "missing", nil); ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
