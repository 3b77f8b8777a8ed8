package frame

import (
	"encoding/binary"
	"math"

	"omnishm/tensor"
)

// descriptor is one decoded [dtype_name, shape, offset] (SPEC §4), its
// shape stored as dims[dims:dims+rank] of the frame's shared dimension list.
type descriptor struct {
	dtype        tensor.DType
	dims, rank   int
	offset, size int
}

// dtypeByName is tensor.ParseDType's table again, so a descriptor's name is
// looked up straight from the header bytes, without a string allocation.
var dtypeByName = func() map[string]tensor.DType {
	m := make(map[string]tensor.DType)
	for d := tensor.Bool; d.Valid(); d++ {
		m[d.String()] = d
	}
	return m
}()

// reader parses the frame header's few msgpack forms; every length is
// checked against the bytes left before use.
type reader struct {
	b []byte
}

func (r *reader) byte() (byte, error) {
	if len(r.b) == 0 {
		return 0, corrupt("header truncated")
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}

func (r *reader) uint(n int) (uint64, error) {
	if len(r.b) < n {
		return 0, corrupt("header truncated")
	}
	var v uint64
	switch n {
	case 1:
		v = uint64(r.b[0])
	case 2:
		v = uint64(binary.BigEndian.Uint16(r.b))
	case 4:
		v = uint64(binary.BigEndian.Uint32(r.b))
	default:
		v = binary.BigEndian.Uint64(r.b)
	}
	r.b = r.b[n:]
	return v, nil
}

// length checks a declared length against the bytes left.
func (r *reader) length(n uint64) (int, error) {
	if n > uint64(len(r.b)) {
		return 0, corrupt("length %d past the end of the header", n)
	}
	return int(n), nil
}

func (r *reader) arrayLen() (int, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n, err = r.uint(2)
	case c == 0xdd:
		n, err = r.uint(4)
	default:
		return 0, corrupt("header: 0x%02x where an array belongs", c)
	}
	if err != nil {
		return 0, err
	}
	return r.length(n) // every element takes at least one byte
}

func (r *reader) str() ([]byte, error) {
	c, err := r.byte()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c >= 0xd9 && c <= 0xdb:
		n, err = r.uint(1 << (c - 0xd9))
	default:
		return nil, corrupt("header: 0x%02x where a string belongs", c)
	}
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

func (r *reader) bin() ([]byte, error) {
	c, err := r.byte()
	if err != nil {
		return nil, err
	}
	if c < 0xc4 || c > 0xc6 {
		return nil, corrupt("header: 0x%02x where bytes belong", c)
	}
	n, err := r.uint(1 << (c - 0xc4))
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

func (r *reader) take(n uint64) ([]byte, error) {
	l, err := r.length(n)
	if err != nil {
		return nil, err
	}
	p := r.b[:l:l]
	r.b = r.b[l:]
	return p, nil
}

// size reads a non-negative integer that fits an int: a dimension or an
// offset.
func (r *reader) size() (int, error) {
	c, err := r.byte()
	if err != nil {
		return 0, err
	}
	var v uint64
	switch {
	case c <= 0x7f:
		v = uint64(c)
	case c >= 0xcc && c <= 0xcf:
		v, err = r.uint(1 << (c - 0xcc))
	case c >= 0xd0 && c <= 0xd3: // a signed form: valid only if non-negative
		n := 1 << (c - 0xd0)
		v, err = r.uint(n)
		if err == nil && v>>(8*n-1) != 0 {
			return 0, corrupt("negative dimension or offset")
		}
	default:
		return 0, corrupt("header: 0x%02x where a non-negative integer belongs", c)
	}
	if err != nil {
		return 0, err
	}
	if v > math.MaxInt {
		return 0, corrupt("dimension or offset %d too large", v)
	}
	return int(v), nil
}

// descriptor reads [dtype_name, shape, offset] and checks the tensor lies
// within a data area of dataLen bytes.
func (r *reader) descriptor(dims *[]int, dataLen int) (descriptor, error) {
	var d descriptor
	if n, err := r.arrayLen(); err != nil || n != 3 {
		return d, corrupt("descriptor is not [dtype, shape, offset]")
	}
	name, err := r.str()
	if err != nil {
		return d, err
	}
	dt, ok := dtypeByName[string(name)]
	if !ok {
		return d, corrupt("%w: %q", tensor.ErrUnknownDType, name)
	}
	rank, err := r.arrayLen()
	if err != nil {
		return d, err
	}
	d.dtype, d.dims, d.rank = dt, len(*dims), rank
	for range rank {
		n, err := r.size()
		if err != nil {
			return d, err
		}
		*dims = append(*dims, n)
	}
	if d.size, err = tensor.ByteSize((*dims)[d.dims:], dt.ItemSize()); err != nil {
		return d, corrupt("%w", err)
	}
	if d.offset, err = r.size(); err != nil {
		return d, err
	}
	if d.offset > dataLen || d.size > dataLen-d.offset {
		return d, corrupt("tensor of %d bytes at offset %d past the %d-byte data area", d.size, d.offset, dataLen)
	}
	return d, nil
}
