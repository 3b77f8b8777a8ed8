package ring

import (
	"errors"

	"omnishm/descriptor"
	"omnishm/proc"
	"omnishm/scope"
)

// This file is the platform-neutral part of the Transport's API: what a
// caller configures and the errors it branches on. The Transport itself
// (transport_linux.go) is Linux-only.

var (
	// ErrClosed is returned by Put on a closed Transport.
	ErrClosed = errors.New("ring: transport closed")
	// ErrName is wrapped when a descriptor names a file that is not a ring
	// of this uid (SPEC §2): never opened, so a descriptor cannot lead a
	// receiver to another file.
	ErrName = errors.New("ring: not a ring name")
)

// Options configure a Transport. The zero value is a disabled ring
// (Capacity 0): every Put is refused and every Get misses.
type Options struct {
	Names    scope.Names // scope.New(wakeupScope)
	Capacity int         // host_ring_bytes: 0 disables; see CheckCapacity; aligned to 16
	// OnSetupFailure is called once per edge whose ring cannot be set up
	// (the edge then uses the per-key path, SPEC §9), with the cause, a
	// marker that could not be retired joined in: the connector logs it.
	// This package never logs.
	OnSetupFailure func(from, to string, err error)
	// OnCorrupt is called once per ring file of another producer that a
	// receiver rejects (a header or frame that fails validation), with the
	// ring's name and what is wrong: the ring is dropped and not attached
	// again until its file or marker changes, while the edge's other rings
	// and its per-key path go on. It runs under the Transport's lock and
	// must not call the Transport; the connector logs it.
	OnCorrupt func(name string, err error)
	// OnWatchFailure is called when discovery starts to go without its
	// inotify watch of the ring directory (no instance to be had, a watch
	// the kernel refused, a reader that stopped), with the cause (see
	// WatchErr): producers are then found by the directory's stamp, a stat
	// per miss. It runs under the Transport's lock and must not call the
	// Transport; the connector logs it.
	OnWatchFailure func(err error)
	// OnCreate is called after this process creates a ring file, OnRemove
	// after it unlinks one (a crash watchdog can track them).
	OnCreate func(path string)
	OnRemove func(path string)
	// OnRetire is called for each ready frame of this Transport's own
	// rings that the Transport itself retires unclaimed, with the frame's
	// handle (as Put returned it) and the call that retired it: so a
	// producer learns of its retirements from the ring, as they happen,
	// and keeps no record of its frames to reconcile. It runs under the
	// ring's lock and its producer's mutex, before Claimed through this
	// Transport can see the frame done, and must not call the Transport.
	OnRetire func(h descriptor.RingHandle, why Retirement)
}

// Retirement is the call that retired a frame unclaimed (Options.OnRetire).
type Retirement uint8

const (
	// RetiredByPut: a Put of the frame's key on the same edge replaced it.
	RetiredByPut Retirement = iota + 1
	// RetiredByCancel: Cancel or CancelPrefix.
	RetiredByCancel
	// RetiredByClose: Close.
	RetiredByClose
)

// Taken is a publication a receiver took from a ring: the decode callback's
// result (the caller's, never a view of ring memory), the payload's size in
// bytes, and the process that published it, the ring's creator (SPEC §3),
// so a receiver can follow that producer's liveness.
type Taken struct {
	Value    any
	Size     int
	Producer proc.ID
}
