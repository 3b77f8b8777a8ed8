//go:build linux

package connector

import (
	"context"
	"fmt"

	"omnishm/keys"
	"omnishm/wire"
)

// ErrMismatch is wrapped by RecvAs's error for a payload that does not
// decode into the requested type; the error names the path of the
// mismatch. It is wire.ErrMismatch.
var ErrMismatch = wire.ErrMismatch

// RecvAs is Recv that decodes the payload into a T with wire.Decode: a
// struct with `msgpack:"name"` tags, a typed slice or map, a leaf such as
// *tensor.Tensor. It returns the value, the payload's size on the wire and
// Recv's error, or one wrapping ErrMismatch that names where the payload
// differs from T, as in
//
//	connector: recv "req-1_0_3": wire: mismatch at .codes.audio: want int64 tensor, got float32 tensor
//
// A payload that does not decode was still claimed: it is gone from the
// edge, and the T returned is partly filled. To keep such a payload, Recv
// and call wire.Decode. The value is the caller's (see wire.Decode for what
// it shares with the decoded payload, which aliases no shared memory).
func RecvAs[T any](ctx context.Context, r Receiver, from, key string) (T, int, error) {
	var v T
	payload, size, err := r.Recv(ctx, from, key)
	if err != nil {
		return v, 0, err
	}
	if err := wire.Decode(payload, &v); err != nil {
		return v, size, fmt.Errorf("connector: recv %q: %w", keys.Shorten(key), err)
	}
	return v, size, nil
}
