package connector

import (
	"fmt"

	"omnishm/descriptor"
	"omnishm/ring"
)

// Claimed reports whether the publication d, returned by c.Put, no longer
// waits for a receiver: a receiver claimed it, or it was retired (replaced,
// cancelled, reclaimed, its ring gone). It reads the files without taking a
// lock, so polling it never makes a receiver's non-blocking lock miss.
func (c *SHM) Claimed(d Descriptor) (bool, error) {
	var claimed bool
	var err error
	switch {
	case d.HostRing != nil && d.Shm == nil:
		claimed, err = ring.Claimed(*d.HostRing)
	case d.Shm != nil && d.HostRing == nil:
		claimed, err = c.segments.Claimed(*d.Shm)
	default:
		return false, fmt.Errorf("connector: claimed: %w", descriptor.ErrBad)
	}
	if err != nil {
		return false, fmt.Errorf("connector: claimed: %w", err)
	}
	return claimed, nil
}
