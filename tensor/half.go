package tensor

import "math"

// Half is an IEEE 754 half-precision value, stored as its bits.
type Half uint16

// BHalf is a bfloat16 value (the high half of a float32), stored as its bits.
type BHalf uint16

// HalfFrom rounds f to the nearest half-precision value (ties to even).
func HalfFrom(f float32) Half {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return Half(sign | 0x7e00)
		}
		return Half(sign | 0x7c00)
	case exp-127 > 15: // overflow
		return Half(sign | 0x7c00)
	case exp-127 >= -14: // normal
		e := uint32(exp-127+15) << 10
		m := mant >> 13
		h := e | m
		rest := mant & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++ // may carry into the exponent, which is the right rounding
		}
		return Half(sign | uint16(h))
	case exp-127 >= -25: // subnormal
		m := mant | 0x800000
		shift := uint32(-14-(exp-127)) + 13
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && h&1 == 1) {
			h++
		}
		return Half(sign | uint16(h))
	default:
		return Half(sign)
	}
}

// Float32 returns the exact float32 value of h.
func (h Half) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: normalise.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}

// BHalfFrom rounds f to the nearest bfloat16 value (ties to even), as PyTorch does.
func BHalfFrom(f float32) BHalf {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it a quiet NaN
		return BHalf(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return BHalf(b >> 16)
}

// Float32 returns the exact float32 value of h.
func (h BHalf) Float32() float32 { return math.Float32frombits(uint32(h) << 16) }
