package tensor

import (
	"fmt"
	"math"
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
	// A zero dimension anywhere means no bytes, whatever the others are, so
	// look for one before multiplying: the result must not depend on order.
	for _, dim := range shape {
		if dim < 0 {
			return 0, fmt.Errorf("%w: negative dimension %d", ErrShape, dim)
		}
	}
	if slices.Contains(shape, 0) {
		return 0, nil
	}
	n := itemSize
	for _, dim := range shape {
		if n > maxBytes/dim {
			// A copy: formatting shape itself would make every caller's
			// shape escape, a stack buffer included.
			return 0, fmt.Errorf("%w: shape %v overflows", ErrShape, slices.Clone(shape))
		}
		n *= dim
	}
	return n, nil
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
