//go:build linux

package connector

import (
	"context"
	"errors"
	"fmt"

	"omnishm/frame"
	"omnishm/keys"
	"omnishm/ring"
	"omnishm/wire"
)

// IntoReceiver is a MessageReceiver that can also decode into memory the
// caller supplies, so a stage that receives a stream of same-shaped tensors
// recycles its buffers instead of allocating one per payload. SHM is one.
type IntoReceiver interface {
	MessageReceiver
	// GetInto is GetMessage decoding into a's memory (SHM.GetInto).
	GetInto(from, to, key string, desc *Descriptor, a frame.Allocator) (Message, bool, error)
	// RecvInto is RecvMessage decoding into a's memory (SHM.RecvInto).
	RecvInto(ctx context.Context, from, key string, a frame.Allocator) (Message, error)
}

var _ IntoReceiver = (*SHM)(nil)

// GetInto is GetMessage decoding into memory the receiver supplies: the
// payload's large bytes (each tensor of a ring frame; a per-key segment,
// or a tensor-free ring payload, read whole into one allocation whose
// tensor, array and image data of 64 KiB or more the result's leaves are
// windows of) come from a, copied once from shared memory, so a stage that
// recycles its buffers (a frame.Arena reset before each call) allocates
// and faults no memory the size of the payload. The rest of the value is
// allocated as Get does.
//
// Ownership: the supplied memory is the caller's before and after the call;
// GetInto writes into it, returns values that may refer to it, and keeps
// no reference to it. Nothing in the result aliases shared memory. An
// Allocate error (wrapped: frame.ErrAllocate) ends the receive before
// anything is written or claimed: the publication stays for a later
// receive with more room. An error that wraps frame.ErrWritten came after
// the supplied memory was written (its payload is consumed, as a corrupt
// one is by Get); other errors leave the memory untouched.
func (c *SHM) GetInto(from, to, key string, desc *Descriptor, a frame.Allocator) (Message, bool, error) {
	if a == nil {
		return Message{}, false, fmt.Errorf("connector: get %q: nil allocator", keys.Shorten(key))
	}
	return c.getMessage(from, to, key, desc, a)
}

// RecvInto is RecvMessage decoding into memory the receiver supplies, as
// GetInto does (same ownership; a publication a has no room for is not
// claimed, and RecvInto returns the Allocate error). a is used by this
// call only, from whichever goroutine claims the payload for it: an Arena
// shared by concurrent RecvInto calls needs a lock of the caller's.
func (c *SHM) RecvInto(ctx context.Context, from, key string, a frame.Allocator) (Message, error) {
	if a == nil {
		return Message{}, fmt.Errorf("connector: recv %q: nil allocator", keys.Shorten(key))
	}
	return c.recv(ctx, from, key, a)
}

// decodeWith is decodeRing into a's memory, or decodeRing for a nil a. A
// frame a has no room for is left in the ring, ready (ring.ErrDeclined),
// as a segment is left in place.
func decodeWith(a frame.Allocator, kind ring.Kind, payload []byte) (v any, err error) {
	switch {
	case a == nil && kind == ring.KindTensors:
		return frame.Decode(payload)
	case a == nil:
		return wire.Unmarshal(payload)
	case kind == ring.KindTensors:
		v, err = frame.DecodeInto(payload, a)
	default:
		v, err = frame.UnmarshalInto(payload, a)
	}
	if errors.Is(err, frame.ErrAllocate) {
		err = fmt.Errorf("%w: %w", ring.ErrDeclined, err)
	}
	return v, err
}

// decodeInto is decodeWith for a, as a ring decode function.
func decodeInto(a frame.Allocator) func(ring.Kind, []byte) (any, error) {
	if a == nil {
		return decodeRing
	}
	return func(kind ring.Kind, payload []byte) (any, error) { return decodeWith(a, kind, payload) }
}
