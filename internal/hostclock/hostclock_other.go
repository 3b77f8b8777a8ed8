//go:build !linux

package hostclock

import "time"

// Now falls back to the wall clock, the one clock other processes share
// where CLOCK_MONOTONIC is not known to be system-wide.
func Now() time.Duration { return time.Duration(time.Now().UnixNano()) }
