package connector

import (
	"log/slog"
	"omnishm/ring"
	"time"
)

// Options configure a shared-memory connector. Start from DefaultOptions:
// as in SPEC §9, HostRingBytes 0 disables the ring.
type Options struct {
	// StageID is this endpoint's stage ("" for none). A numeric stage owns a
	// wakeup FIFO so Recv can sleep until a producer wakes it.
	StageID string
	// HostRingBytes is the ring capacity per producer and edge: 0 disables
	// the ring (per-key segments only), else 4096..67108864.
	HostRingBytes int
	// WakeupScope names the deployment; both ends of an edge must agree.
	// Empty means "no scope": names are keyed by the parent pid.
	WakeupScope string
	// Wakeups enables the FIFOs of SPEC §8 (also off when the environment
	// sets VLLM_OMNI_SHM_WAKEUP=0).
	Wakeups bool
	// PollInterval bounds how long Recv sleeps between polls when no wakeup
	// arrives (wakeups are hints; a lost one only costs this much latency).
	// Zero means 50ms.
	PollInterval time.Duration
	// Spin is how long Recv keeps polling the rings (no system call per
	// poll) after a miss before it sleeps on its FIFO. Zero never spins.
	Spin time.Duration
	// Logger receives the one-per-edge fallback warnings; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultOptions returns the SPEC defaults (a 4 MiB ring, wakeups on) and
// a 50 µs spin before Recv sleeps: a sleep and a wakeup cost more than that.
func DefaultOptions() Options {
	return Options{HostRingBytes: ring.DefaultCapacity, Wakeups: true, Spin: 50 * time.Microsecond}
}
