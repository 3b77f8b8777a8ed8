package ring

import (
	"errors"
	"fmt"
)

// The one home of the ring's capacity bounds (SPEC §3): host_ring_bytes is 0
// (the ring disabled) or within MinCapacity..MaxCapacity, and DefaultCapacity
// when a configuration does not say.
const (
	MinCapacity     = 4096
	MaxCapacity     = 64 << 20
	DefaultCapacity = 4 << 20
)

// ErrCapacity is wrapped when host_ring_bytes is neither 0 nor within
// MinCapacity..MaxCapacity.
var ErrCapacity = errors.New("host_ring_bytes must be 0 or between 4096 and 67108864")

// CheckCapacity reports whether n may be a host_ring_bytes value.
func CheckCapacity(n int) error {
	if n != 0 && (n < MinCapacity || n > MaxCapacity) {
		return fmt.Errorf("%w, not %d", ErrCapacity, n)
	}
	return nil
}
