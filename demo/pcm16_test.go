//go:build linux

package demo

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// pcm16Edges are the samples where a vector kernel could part from
// pcm16Scalar: NaNs (any payload), infinities, signed zeros, the clamp's
// bounds and just past them, rounding's halfway points, subnormals.
var pcm16Edges = []float32{
	float32(math.NaN()), math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00123),
	float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)),
	1, -1, math.Nextafter32(1, 2), math.Nextafter32(-1, -2), 2, -2, math.MaxFloat32, -math.MaxFloat32,
	0.5, -0.5, 1.5 / math.MaxInt16, -1.5 / math.MaxInt16, 0.5 / math.MaxInt16, -0.5 / math.MaxInt16,
	math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 1e-30, -1e-30,
}

// pcm16 gives pcm16Scalar's bytes at every length and alignment, for
// audio, random values and pcm16Edges, whether whole blocks go through the
// vector kernel or not.
func TestPCM16MatchesScalar(t *testing.T) {
	t.Logf("vector kernel: %v", hasPCM16x8)
	rng := rand.New(rand.NewPCG(1, 2))
	audio := synthesize(chunkCodes(3, 5), 5)
	random := make([]float32, 1000)
	for i := range random {
		random[i] = (rng.Float32()*2 - 1) * 1.2
	}
	var edges []float32
	for range 3 { // every edge at every position of a block
		edges = append(edges, pcm16Edges...)
	}
	for name, x := range map[string][]float32{"audio": audio, "random": random, "edges": edges} {
		for start := range 9 {
			for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 64, len(x) - start} {
				if start+n > len(x) {
					continue
				}
				checkPCM16(t, name, x[start:start+n])
			}
		}
	}
}

// checkPCM16 fails t unless pcm16 appends pcm16Scalar's bytes for x, and
// leaves what dst held before alone.
func checkPCM16(t *testing.T, name string, x []float32) {
	t.Helper()
	want := make([]byte, 2*len(x))
	pcm16Scalar(want, x)
	got := pcm16([]byte{0xaa}, x)
	if got[0] != 0xaa || string(got[1:]) != string(want) {
		for i := range x {
			if got[1+2*i] != want[2*i] || got[2+2*i] != want[2*i+1] {
				t.Fatalf("%s, %d samples: sample %d (%v, bits %#x) = %#04x, want %#04x", name, len(x), i, x[i],
					math.Float32bits(x[i]), binary.LittleEndian.Uint16(got[1+2*i:]), binary.LittleEndian.Uint16(want[2*i:]))
			}
		}
		t.Fatalf("%s, %d samples: the byte before the samples changed", name, len(x))
	}
}

// FuzzPCM16: any float32 bits convert as pcm16Scalar converts them.
func FuzzPCM16(f *testing.F) {
	seed := make([]byte, 4*len(pcm16Edges))
	for i, v := range pcm16Edges {
		binary.LittleEndian.PutUint32(seed[4*i:], math.Float32bits(v))
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		x := make([]float32, len(b)/4)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		checkPCM16(t, "fuzz", x)
	})
}
