package frame

import (
	"encoding/binary"
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
func readHeader(header []byte, dataLen int, descs []descriptor, dims []int) (_ []descriptor, _ []int, tree, nonce []byte, err error) {
	if d, s, tree, nonce, ok := readHeaderQuick(header, dataLen, descs, dims); ok {
		return d, s, tree, nonce, nil
	}
	return readHeaderAny(wire.NewReader(header), dataLen, descs, dims)
}

// readHeaderQuick is readHeader for the header's usual form, the one
// Prepare writes for a few tensors (and the seed for the same frames):
// fixarrays, fixstr dtype names, dimensions and offsets as integers of at
// most 32 bits, the tree in a bin, the nonce in a bin8. It reads the bytes
// in place, not value by value through a Reader (a call and an error result
// per value: most of the time a small frame's header took), and reports
// ok=false at the first byte outside that form or any check readHeaderAny
// makes, which then reads the header and decides. Where ok, its results are
// readHeaderAny's.
func readHeaderQuick(h []byte, dataLen int, descs []descriptor, dims []int) (_ []descriptor, _ []int, tree, nonce []byte, ok bool) {
	if len(h) < 2 || h[0] != 0x93 || h[1]&0xf0 != 0x90 {
		return descs, dims, nil, nil, false
	}
	d0, s0 := len(descs), len(dims)
	fail := func() ([]descriptor, []int, []byte, []byte, bool) { return descs[:d0], dims[:s0], nil, nil, false }
	count, i, total := int(h[1]&0x0f), 2, 0
	for range count {
		// [fixstr dtype, fixarray shape, offset]
		if i+2 > len(h) || h[i] != 0x93 || h[i+1]&0xe0 != 0xa0 {
			return fail()
		}
		n := int(h[i+1] & 0x1f)
		if i += 2; n >= len(h)-i { // the name and the shape's header
			return fail()
		}
		dt, known := tensor.LookupDType(string(h[i : i+n]))
		if i += n; !known || h[i]&0xf0 != 0x90 {
			return fail()
		}
		d := descriptor{dtype: dt, dims: len(dims), rank: int(h[i] & 0x0f)}
		i++
		for range d.rank {
			var v int
			if v, i, ok = quickSize(h, i); !ok {
				return fail()
			}
			dims = append(dims, v)
		}
		var err error
		if d.size, err = tensor.ByteSize(dims[d.dims:], dt.ItemSize()); err != nil {
			return fail()
		}
		if d.offset, i, ok = quickSize(h, i); !ok || d.offset > dataLen || d.size > dataLen-d.offset {
			return fail()
		}
		if total += d.size; total > dataLen {
			return fail()
		}
		descs = append(descs, d)
	}
	if tree, i, ok = quickBin(h, i); !ok || i+2+nonceSize != len(h) || h[i] != 0xc4 || h[i+1] != nonceSize {
		return fail()
	}
	return descs, dims, tree, h[i+2 : len(h) : len(h)], true
}

// quickSize reads a non-negative integer of at most 32 bits at h[i:] for
// readHeaderQuick, and the position after it.
func quickSize(h []byte, i int) (int, int, bool) {
	if i >= len(h) {
		return 0, i, false
	}
	switch c := h[i]; {
	case c <= 0x7f:
		return int(c), i + 1, true
	case c == 0xcc && i+2 <= len(h):
		return int(h[i+1]), i + 2, true
	case c == 0xcd && i+3 <= len(h):
		return int(binary.BigEndian.Uint16(h[i+1:])), i + 3, true
	case c == 0xce && i+5 <= len(h):
		// Past math.MaxInt (a 32-bit int) it would be negative: left to
		// readSize, which refuses it, as for any other reader.
		if v := binary.BigEndian.Uint32(h[i+1:]); uint64(v) <= math.MaxInt {
			return int(v), i + 5, true
		}
	}
	return 0, i, false
}

// quickBin reads a bin at h[i:] for readHeaderQuick, aliasing h, and the
// position after it.
func quickBin(h []byte, i int) ([]byte, int, bool) {
	var n uint64 // not an int: a bin32's length is negative in a 32-bit one
	var at int
	switch {
	case i+2 <= len(h) && h[i] == 0xc4:
		n, at = uint64(h[i+1]), i+2
	case i+3 <= len(h) && h[i] == 0xc5:
		n, at = uint64(binary.BigEndian.Uint16(h[i+1:])), i+3
	case i+5 <= len(h) && h[i] == 0xc6:
		n, at = uint64(binary.BigEndian.Uint32(h[i+1:])), i+5
	default:
		return nil, i, false
	}
	if n > uint64(len(h)-at) {
		return nil, i, false
	}
	end := at + int(n)
	return h[at:end:end], end, true
}

// readHeaderAny is readHeader for any header msgpack allows: value by value
// through h.
func readHeaderAny(h *wire.Reader, dataLen int, descs []descriptor, dims []int) (_ []descriptor, _ []int, tree, nonce []byte, err error) {
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
