package tensor

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// conversion is a float32 and the bits its 16-bit form must have.
type conversion[H Half | BHalf] struct {
	f    float32
	want H
}

// f32 is the float32 of the given bits, for cases at exact bit patterns.
var f32 = math.Float32frombits

func checkConversions[H Half | BHalf](t *testing.T, name string, from func(float32) H, cases []conversion[H]) {
	t.Helper()
	for _, c := range cases {
		if got := from(c.f); got != c.want {
			t.Errorf("%s(%g = %#08x) = %#04x, want %#04x", name, c.f, math.Float32bits(c.f), uint16(got), uint16(c.want))
		}
	}
}

func TestHalfFromKnownBits(t *testing.T) {
	checkConversions(t, "HalfFrom", HalfFrom, []conversion[Half]{
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},                 // largest finite
		{65519.996, 0x7bff},             // just below the halfway point to 65536
		{65520, 0x7c00},                 // halfway to the next (2^16): ties to even is Inf
		{1e6, 0x7c00},                   // overflow
		{-1e6, 0xfc00},                  // negative overflow
		{float32(math.Inf(1)), 0x7c00},  // +Inf
		{float32(math.Inf(-1)), 0xfc00}, // -Inf
		{0, 0x0000},                     // +0
		{float32(math.Copysign(0, -1)), 0x8000},
		{0x1p-14, 0x0400},     // smallest normal
		{0x1p-24, 0x0001},     // smallest subnormal
		{0x3ffp-24, 0x03ff},   // largest subnormal
		{-0x1p-24, 0x8001},    // negative subnormal
		{0x1p-25, 0x0000},     // half the smallest subnormal: tie to even (0)
		{0x1.8p-25, 0x0001},   // above the tie: rounds up
		{0x3p-25, 0x0002},     // tie between 1 and 2 ulps: even is 2
		{0x5p-25, 0x0002},     // tie between 2 and 3 ulps: even is 2
		{0x1p-26, 0x0000},     // underflow
		{1e-10, 0x0000},       // underflow
		{f32(1), 0x0000},      // float32 subnormal underflows
		{1 + 0x1p-11, 0x3c00}, // tie between 0x3c00 and 0x3c01: even
		{1 + 0x3p-11, 0x3c02}, // tie between 0x3c01 and 0x3c02: even
		{1 + 0x1p-11 + 0x1p-20, 0x3c01},
		{2049, 0x6800},        // tie between 2048 and 2050
		{2051, 0x6802},        // tie between 2050 and 2052
		{0x1.ffcp-15, 0x0400}, // rounds up from subnormal into the smallest normal
		{0x1.ffep-15, 0x0400}, // halfway 0x3ff.8 ulps: even carries to 0x400
		{0.1, 0x2e66},
		{3.14159265, 0x4248},
	})
}

func TestHalfNaN(t *testing.T) {
	for _, bits := range []uint32{0x7fc00000, 0x7f800001, 0xffc00000, 0x7fffffff, 0xff800001} {
		h := HalfFrom(math.Float32frombits(bits))
		if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
			t.Errorf("HalfFrom(NaN %#08x) = %#04x, not a NaN", bits, uint16(h))
		}
		if h>>15 != Half(bits>>31) {
			t.Errorf("HalfFrom(NaN %#08x) = %#04x lost the sign", bits, uint16(h))
		}
		if f := h.Float32(); !math.IsNaN(float64(f)) {
			t.Errorf("Half(%#04x).Float32() = %v, want NaN", uint16(h), f)
		}
	}
}

// halfValue is an independent reading of half bits: sign * mant * 2^exp.
func halfValue(h Half) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	mant := float64(h & 0x3ff)
	switch exp {
	case 0x1f:
		if mant != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(mant, -24)
	}
	return sign * math.Ldexp(1024+mant, exp-25)
}

// TestHalfExhaustive: every half value converts to float32 exactly, and
// back to the same bits.
func TestHalfExhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := Half(i)
		want := halfValue(h)
		f := h.Float32()
		if math.IsNaN(want) {
			if !math.IsNaN(float64(f)) {
				t.Errorf("Half(%#04x).Float32() = %v, want NaN", i, f)
			}
			continue
		}
		if float64(f) != want || math.Signbit(float64(f)) != math.Signbit(want) {
			t.Fatalf("Half(%#04x).Float32() = %v, want %v", i, f, want)
		}
		if back := HalfFrom(f); back != h {
			t.Fatalf("HalfFrom(Half(%#04x).Float32()) = %#04x", i, uint16(back))
		}
	}
}

// TestHalfRounding compares HalfFrom on random and halfway float32 values
// with a reference that searches the sorted finite halves for the nearest,
// ties to the even one.
func TestHalfRounding(t *testing.T) {
	var halves []Half // positive finite, in increasing order
	for i := range 0x7c00 {
		halves = append(halves, Half(i))
	}
	nearest := func(f float32) Half {
		x := math.Abs(float64(f))
		var sign Half
		if math.Signbit(float64(f)) {
			sign = 0x8000
		}
		if x >= 65520 { // halfway past the largest finite, and beyond
			return sign | 0x7c00
		}
		i := sort.Search(len(halves), func(i int) bool { return halfValue(halves[i]) >= x })
		if i == len(halves) {
			return sign | 0x7bff
		}
		if i == 0 || halfValue(halves[i]) == x {
			return sign | halves[i]
		}
		lo, hi := halves[i-1], halves[i]
		dlo, dhi := x-halfValue(lo), halfValue(hi)-x
		switch {
		case dlo < dhi:
			return sign | lo
		case dhi < dlo:
			return sign | hi
		case lo&1 == 0:
			return sign | lo
		}
		return sign | hi
	}
	check := func(f float32) {
		if got, want := HalfFrom(f), nearest(f); got != want {
			t.Fatalf("HalfFrom(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), uint16(got), uint16(want))
		}
	}
	// Every halfway point and its neighbours.
	for i := range 0x7bff {
		mid := float32((halfValue(Half(i)) + halfValue(Half(i+1))) / 2)
		check(mid)
		check(-mid)
		check(math.Nextafter32(mid, 0))
		check(math.Nextafter32(mid, 1e9))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		// Exponents around the half range: magnitudes 2^-30 .. 2^17.
		f := math.Float32frombits(uint32(r.IntN(48)+97)<<23 | r.Uint32()&0x807fffff)
		check(f)
	}
}

func TestBHalf(t *testing.T) {
	checkConversions(t, "BHalfFrom", BHalfFrom, []conversion[BHalf]{
		{1, 0x3f80},
		{-2, 0xc000},
		{0.5, 0x3f00},
		{f32(0x3f808000), 0x3f80}, // tie between 0x3f80 and 0x3f81: even
		{f32(0x3f818000), 0x3f82}, // tie between 0x3f81 and 0x3f82: even
		{f32(0x3f808001), 0x3f81}, // just above the tie
		{f32(0x3f807fff), 0x3f80}, // just below the tie
		{math.MaxFloat32, 0x7f80}, // rounds up to Inf, as PyTorch does
		{f32(0x7f7f7fff), 0x7f7f}, // largest that stays finite
		{float32(math.Inf(1)), 0x7f80},
		{float32(math.Inf(-1)), 0xff80},
		{float32(math.Copysign(0, -1)), 0x8000},
		{f32(0x00010000), 0x0001}, // subnormal, exact
		{f32(0x00008000), 0x0000}, // subnormal tie: even
		{f32(0x00018000), 0x0002}, // subnormal tie: even
		{3.14159265, 0x4049},
	})
	// NaNs stay NaNs (a signalling NaN whose payload is in the low bits must
	// not become Inf), keeping their sign.
	for _, bits := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff} {
		b := BHalfFrom(f32(bits))
		if !math.IsNaN(float64(b.Float32())) || uint32(b>>15) != bits>>31 {
			t.Errorf("BHalfFrom(NaN %#08x) = %#04x", bits, uint16(b))
		}
	}
	// Every bfloat16 is exact in float32 and converts back to itself.
	for i := range 1 << 16 {
		b := BHalf(i)
		f := b.Float32()
		if math.Float32bits(f) != uint32(i)<<16 {
			t.Fatalf("BHalf(%#04x).Float32() bits %#08x", i, math.Float32bits(f))
		}
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := BHalfFrom(f); back != b {
			t.Fatalf("BHalfFrom(BHalf(%#04x).Float32()) = %#04x", i, uint16(back))
		}
	}
}
