package tensor

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// maxBytes bounds any shape's byte size so products never overflow int.
const maxBytes = math.MaxInt >> 1

// ByteSize returns product(shape) * itemSize, or an error for a negative
// dimension or a product that would overflow. Decoders of untrusted bytes
// rely on it: a hostile shape must give an error, never a wrapped size.
func ByteSize(shape []int, itemSize int) (int, error) {
	if itemSize <= 0 {
		return 0, fmt.Errorf("%w: item size %d", ErrShape, itemSize)
	}
	// One pass, multiplying without a division: a negative dimension is an
	// error wherever it is, and a zero one means no bytes, whatever the
	// others are (the result must not depend on order), so an overflow is
	// only said at the end.
	n, zero, over := uint64(itemSize), false, false
	for _, dim := range shape {
		if dim < 0 {
			return 0, fmt.Errorf("%w: negative dimension %d", ErrShape, dim)
		}
		hi, lo := bits.Mul64(n, uint64(dim))
		zero, over, n = zero || dim == 0, over || hi != 0 || lo > maxBytes, lo
	}
	switch {
	case zero:
		return 0, nil
	case over:
		// A copy: formatting shape itself would make every caller's shape
		// escape, a stack buffer included.
		return 0, fmt.Errorf("%w: shape %v overflows", ErrShape, slices.Clone(shape))
	}
	return int(n), nil
}

func checkData(shape []int, itemSize, dataLen int) error {
	n, err := ByteSize(shape, itemSize)
	if err != nil {
		return err
	}
	if n != dataLen {
		return fmt.Errorf("%w: shape %v needs %d bytes, have %d", ErrShape, shape, n, dataLen)
	}
	return nil
}
