package frame_test

import (
	"testing"

	"omnishm/frame"
	"omnishm/tensor"
)

func roundTrip(b *testing.B, payload any, buf []byte) {
	p, err := frame.Prepare(payload, 0)
	if err != nil {
		b.Fatal(err)
	}
	n := p.Size()
	if err := p.Write(buf[:n]); err != nil {
		b.Fatal(err)
	}
	p.Release()
	if _, err := frame.Decode(buf[:n]); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSmallTree: the seed's per-step codec payload.
func BenchmarkSmallTree(b *testing.B) {
	ids := make([]int64, 28)
	audio, _ := tensor.FromSlice(ids, 1, 28)
	payload := map[string]any{
		"codes": map[string]any{"audio": audio},
		"meta":  map[string]any{"finished": tensor.Scalar(false)},
	}
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		roundTrip(b, payload, buf)
	}
}

// BenchmarkDecodeSmallTree: the receiving half of BenchmarkSmallTree, where
// the header is read.
func BenchmarkDecodeSmallTree(b *testing.B) {
	ids := make([]int64, 28)
	audio, _ := tensor.FromSlice(ids, 1, 28)
	buf, err := frame.Marshal(map[string]any{
		"codes": map[string]any{"audio": audio},
		"meta":  map[string]any{"finished": tensor.Scalar(false)},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := frame.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLargeTensor: a 1 MiB float32 tensor; compare with
// BenchmarkLargeTensorBaseline, the two copies any transport makes.
func BenchmarkLargeTensor(b *testing.B) {
	x, _ := tensor.Zeros(tensor.Float32, 256, 1024)
	buf := make([]byte, 2<<20)
	b.SetBytes(int64(len(x.Data)))
	b.ReportAllocs()
	for b.Loop() {
		roundTrip(b, map[string]any{"hidden": x}, buf)
	}
}

func BenchmarkLargeTensorBaseline(b *testing.B) {
	src := make([]byte, 1<<20)
	ring := make([]byte, 1<<20)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		copy(ring, src)
		dst := make([]byte, len(ring)) // the receiver owns its copy
		copy(dst, ring)
	}
}

// BenchmarkPairPayload: the codec's share of connector's
// BenchmarkPairFlockRatio, a map of one 512-byte float32 tensor, prepared,
// written and decoded.
func BenchmarkPairPayload(b *testing.B) {
	x, _ := tensor.FromSlice(make([]float32, 128), 128)
	payload := map[string]any{"data": x}
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		roundTrip(b, payload, buf)
	}
}
