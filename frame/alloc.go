package frame

import (
	"errors"
	"fmt"
	"io"

	"omnishm/wire"
)

// ErrWritten is wrapped by a receive's error when it failed after writing
// into memory the receiver supplied: what that memory holds is then
// undefined. A receive whose error does not wrap it left the supplied
// memory untouched.
var ErrWritten = errors.New("frame: supplied memory was written")

// ErrAllocate is wrapped by a decode's error when the Allocator failed (an
// Arena too small, say): nothing was written then.
var ErrAllocate = errors.New("frame: supplied memory")

// Allocator supplies the memory a receive decodes payload bytes into
// (receiver-supplied memory, in the spirit of arrow-go's memory.Allocator),
// so a stage that receives a stream of same-shaped tensors can recycle
// buffers instead of having a fresh one allocated, zeroed and faulted in
// per message.
//
// Allocate returns a slice of length n for the receive to fill, or an
// error, which ends the receive before anything is written. The memory is
// the allocator's owner's throughout: the receive writes into it, returns
// values that may refer to it, and keeps no reference to it once it
// returns. Nothing in the result aliases shared memory.
type Allocator interface {
	Allocate(n int) ([]byte, error)
}

// Arena is an Allocator over one buffer the caller supplies: each
// Allocate takes the next 64-aligned n bytes of it. A receive asking for
// more than is left fails with an error wrapping io.ErrShortBuffer that
// names both sizes; nothing was written then. Reset it with the buffer
// before each receive to recycle the buffer: what the last receive
// returned from it is overwritten by the next. The zero Arena has no
// memory (every Allocate fails). It is not safe for concurrent use.
//
// A receive refused for want of room may have taken part of the arena for
// its first tensors (nothing was written there): Reset before retrying.
// Allocations are 64-byte aligned relative to the buffer's start, so
// aligned in memory when the buffer is.
type Arena struct {
	buf []byte
	off int
}

// NewArena returns an Arena over buf.
func NewArena(buf []byte) *Arena { return &Arena{buf: buf} }

// Reset makes buf the arena's memory, all of it free.
func (a *Arena) Reset(buf []byte) { a.buf, a.off = buf, 0 }

// Used is how many bytes of the buffer Allocate has handed out since the
// last Reset, alignment included.
func (a *Arena) Used() int { return a.off }

// Allocate implements Allocator.
func (a *Arena) Allocate(n int) ([]byte, error) {
	start := (a.off + 63) &^ 63 // a cache line: tensors start aligned
	if n < 0 || start > len(a.buf) || n > len(a.buf)-start {
		return nil, fmt.Errorf("frame: supplied buffer of %d bytes has %d free, need %d: %w",
			len(a.buf), max(len(a.buf)-start, 0), n, io.ErrShortBuffer)
	}
	a.off = start + n
	return a.buf[start : start+n : start+n], nil
}

// Allocate is a.Allocate checked to give exactly n bytes, its errors
// wrapping ErrAllocate: what a receive that reads into supplied memory
// outside this package (a per-key segment) calls.
func Allocate(a Allocator, n int) ([]byte, error) {
	b, err := a.Allocate(n)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAllocate, err)
	}
	if len(b) != n {
		return nil, fmt.Errorf("%w: the allocator gave %d bytes, asked for %d", ErrAllocate, len(b), n)
	}
	return b, nil
}

// UnmarshalInto decodes plain msgpack bytes (payload kind 0) as
// wire.UnmarshalOwned does, after copying them into one Allocate(len(b))
// of a: the large bins (tensor, array and image data of 64 KiB or more)
// are windows of that memory, smaller values are copied out of it. b is
// not kept. A decode failure wraps ErrWritten (the copy was made).
func UnmarshalInto(b []byte, a Allocator) (any, error) {
	buf, err := Allocate(a, len(b))
	if err != nil {
		return nil, err
	}
	copy(buf, b)
	return UnmarshalSupplied(buf)
}

// UnmarshalSupplied decodes plain msgpack bytes that were read into
// receiver-supplied memory (a per-key segment read by
// segment.Claimer.ClaimInto): large bins alias buf, as in UnmarshalInto,
// and a failure wraps ErrWritten.
func UnmarshalSupplied(buf []byte) (any, error) {
	v, err := wire.UnmarshalOwned(buf)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWritten, err)
	}
	return v, nil
}
