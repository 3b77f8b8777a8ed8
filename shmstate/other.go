//go:build !linux

package shmstate

import "errors"

// ErrUnsupported is returned where /dev/shm, flock and /proc are not Linux's.
var ErrUnsupported = errors.New("shmstate: only supported on Linux")

// Scan is Linux-only.
func Scan(Options) (*State, error) { return nil, ErrUnsupported }

// Prune is Linux-only.
func Prune(PruneOptions) (Report, error) { return Report{}, ErrUnsupported }
