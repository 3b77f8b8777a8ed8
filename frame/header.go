package frame

import (
	"errors"
	"fmt"
	"math"

	"omnishm/tensor"
	"omnishm/wire"
)

// descriptor is one decoded [dtype_name, shape, offset] (SPEC §4), its
// shape stored as dims[dims:dims+rank] of the frame's shared dimension list.
type descriptor struct {
	dtype        tensor.DType
	dims, rank   int
	offset, size int
}

// readHeader reads a frame's header, [descriptors, tree, nonce] (SPEC §4),
// for a data area of dataLen bytes. It appends the descriptors to descs and
// every shape to dims, each as a window of that one list (storage the caller
// may keep on its stack, hence no result struct); tree and nonce alias the
// header. Its errors do not wrap ErrCorrupt: the caller adds it.
func readHeader(h *wire.Reader, dataLen int, descs []descriptor, dims []int) (_ []descriptor, _ []int, tree, nonce []byte, err error) {
	fail := func(format string, a ...any) ([]descriptor, []int, []byte, []byte, error) {
		return nil, nil, nil, nil, fmt.Errorf(format, a...)
	}
	if n, err := h.ArrayLen(); err != nil || n != 3 {
		return fail("not [descriptors, tree, nonce]")
	}
	count, err := h.ArrayLen()
	if err != nil {
		return fail("descriptors: %w", err)
	}
	if count > h.Len()/4 { // a descriptor takes at least 4 bytes
		return fail("%d descriptors in %d bytes", count, h.Len())
	}
	total := 0
	for i := range count {
		// Read in place: a descriptor returned by value was copied twice.
		descs = append(descs, descriptor{})
		d := &descs[len(descs)-1]
		if dims, err = readDescriptor(h, d, dims, dataLen); err != nil {
			return fail("descriptor %d: %w", i, err)
		}
		// A writer's regions are disjoint, so they total at most the data
		// area; overlapping ones would make a large frame's per-tensor
		// copies (in Decode) a multiple of its size.
		if total += d.size; total > dataLen {
			return fail("descriptor %d: tensors total more than the %d-byte data area", i, dataLen)
		}
	}
	if tree, err = h.Bin(); err != nil {
		return fail("tree: %w", err)
	}
	if nonce, err = h.Bin(); err != nil {
		return fail("nonce: %w", err)
	}
	if h.Len() != 0 {
		return fail("%d bytes after it", h.Len())
	}
	return descs, dims, tree, nonce, nil
}

// readDescriptor reads [dtype_name, shape, offset] into d, appends the
// shape to dims and returns dims, and checks the tensor lies within a data
// area of dataLen bytes. (dims by value: through a pointer, a caller's
// stack buffer would escape.)
func readDescriptor(h *wire.Reader, d *descriptor, dims []int, dataLen int) ([]int, error) {
	if n, err := h.ArrayLen(); err != nil || n != 3 {
		return dims, errors.New("not [dtype, shape, offset]")
	}
	name, err := h.Str()
	if err != nil {
		return dims, fmt.Errorf("dtype: %w", err)
	}
	dt, ok := tensor.LookupDType(string(name))
	if !ok {
		return dims, fmt.Errorf("%w: %q", tensor.ErrUnknownDType, name)
	}
	rank, err := h.ArrayLen()
	if err != nil {
		return dims, fmt.Errorf("shape: %w", err)
	}
	d.dtype, d.dims, d.rank = dt, len(dims), rank
	for range rank {
		n, err := readSize(h)
		if err != nil {
			return dims, fmt.Errorf("shape: %w", err)
		}
		dims = append(dims, n)
	}
	if d.size, err = tensor.ByteSize(dims[d.dims:], dt.ItemSize()); err != nil {
		return dims, err
	}
	if d.offset, err = readSize(h); err != nil {
		return dims, fmt.Errorf("offset: %w", err)
	}
	if d.offset > dataLen || d.size > dataLen-d.offset {
		return dims, fmt.Errorf("tensor of %d bytes at offset %d past the %d-byte data area", d.size, d.offset, dataLen)
	}
	return dims, nil
}

// readSize reads a dimension or an offset: a non-negative integer that fits
// an int.
func readSize(h *wire.Reader) (int, error) {
	u, err := h.Uint()
	if err != nil {
		return 0, err
	}
	if u > math.MaxInt {
		return 0, fmt.Errorf("%d too large", u)
	}
	return int(u), nil
}
