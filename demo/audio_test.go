//go:build linux

package demo

import (
	"errors"
	"math"
	"testing"
)

func TestWAVHeaderRoundTrip(t *testing.T) {
	pcm := pcm16(nil, []float32{0, 0.5, -0.5, 1, -1, 2, -2})
	want := []int16{0, 16384, -16384, 32767, -32767, 32767, -32767}
	for i, w := range want {
		if got := int16(uint16(pcm[2*i]) | uint16(pcm[2*i+1])<<8); got != w {
			t.Fatalf("sample %d = %d, want %d", i, got, w)
		}
	}
	file := append(wavHeader(len(pcm)), pcm...)
	if n, err := wavSamples(file); err != nil || n != len(want) {
		t.Fatalf("wavSamples = %d, %v", n, err)
	}
	for name, bad := range map[string][]byte{
		"short":     file[:10],
		"truncated": file[:len(file)-1],
		"not RIFF":  append([]byte("RIFX"), file[4:]...),
		"stereo":    append(append(append([]byte{}, file[:22]...), 2, 0), file[24:]...),
	} {
		if _, err := wavSamples(bad); !errors.Is(err, errBadWAV) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// pcm16's rounding is math.Round's, at every step of a sweep and at the
// halfway points.
func TestPCM16RoundsAsMathRound(t *testing.T) {
	var x []float32
	for i := -70000; i <= 70000; i++ {
		x = append(x, float32(i)/65534, (float32(i)+0.5)/math.MaxInt16)
	}
	pcm := pcm16(nil, x)
	for i, v := range x {
		want := int16(math.Round(float64(max(-1, min(1, v))) * math.MaxInt16))
		if got := int16(uint16(pcm[2*i]) | uint16(pcm[2*i+1])<<8); got != want {
			t.Fatalf("sample %v = %d, want %d", v, got, want)
		}
	}
}

func TestDemoAudioIsDeterministic(t *testing.T) {
	codes := chunkCodes(3, 5)
	if len(codes) != codesPerChunk {
		t.Fatalf("%d codes", len(codes))
	}
	for _, c := range codes {
		if c < 0 || c >= codebookSize {
			t.Fatalf("code %d out of the codebook", c)
		}
	}
	a, b := synthesize(codes, 5), synthesize(chunkCodes(3, 5), 5)
	if len(a) != samplesPerChunk || string(pcm16(nil, a)) != string(pcm16(nil, b)) {
		t.Fatal("synthesis is not deterministic")
	}
	if string(pcm16(nil, a)) == string(pcm16(nil, synthesize(chunkCodes(3, 6), 6))) {
		t.Fatal("different chunks give the same audio")
	}
}

// synthesize's rotation stays on the tone it stands for: every sample
// within float32 rounding of 0.25·sin(2π·f·s/rate) at its position s.
func TestSynthesizeFollowsTheTone(t *testing.T) {
	for _, n := range []int{0, 5, 1000} {
		codes := chunkCodes(3, n)
		got := synthesize(codes, n)
		for j, v := range got {
			i, k := j/samplesPerCode, j%samplesPerCode
			freq := 110 * math.Pow(2, float64(codes[i]%48)/12)
			s := n*len(got) + i*samplesPerCode + k
			if want := 0.25 * math.Sin(2*math.Pi*freq*float64(s)/sampleRate); math.Abs(float64(v)-want) > 1e-6 {
				t.Fatalf("chunk %d sample %d = %v, want %v", n, j, v, want)
			}
		}
	}
}

// BenchmarkPCM16 is stage 2's conversion of one chunk's samples.
func BenchmarkPCM16(b *testing.B) {
	x := synthesize(chunkCodes(3, 5), 5)
	dst := make([]byte, 0, 2*len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		dst = pcm16(dst[:0], x)
	}
}

// BenchmarkSynthesize is one chunk's synthesis, which stage 1 does and
// stage 2 repeats to check it.
func BenchmarkSynthesize(b *testing.B) {
	codes, out := chunkCodes(3, 5), make([]float32, samplesPerChunk)
	b.SetBytes(int64(4 * samplesPerChunk))
	for b.Loop() {
		synthesizeInto(out, codes, 5)
	}
}
