//go:build linux

package connector

import (
	"fmt"
	"log/slog"
	"time"

	"omnishm/keys"
	"omnishm/ring"
	"omnishm/scope"
)

// NoRing as Options.HostRingBytes disables the host ring: every payload
// takes the per-key path (what host_ring_bytes: 0 means in a configuration).
const NoRing = -1

// RingBytes maps a host_ring_bytes value as SPEC §9, configurations and
// command-line flags write it (0 disables the ring) onto
// Options.HostRingBytes, where 0 means the default: 0 becomes NoRing,
// anything else is kept for Open to check.
func RingBytes(hostRingBytes int) int {
	if hostRingBytes == 0 {
		return NoRing
	}
	return hostRingBytes
}

// Defaults of the zero Options' fields.
const (
	// DefaultPollInterval bounds the sleep between polls when no wakeup
	// arrives: a producer without wakeups (or a lost hint) is still read.
	DefaultPollInterval = 50 * time.Millisecond
	// DefaultSpin is how long a Recv that would be the connector's only
	// waiter polls the rings after a miss before it sleeps: with one
	// message in flight a wakeup costs more than that. On the project's
	// 2-core VM 100 µs catches the next request-response message that 50 µs
	// often missed (ring latency p50 about 0.6x), 200 µs gains no more; a
	// stream with many in flight pays about 7 % per message for the longer
	// spin. Its clock is read through the vDSO: no system call.
	DefaultSpin = 100 * time.Microsecond
)

// Options configure a shared-memory connector. The zero value is the
// defaults of SPEC §9: a 4 MiB ring per producer and edge, wakeups on,
// names keyed by the parent pid, no stage of its own (the endpoint only
// puts). Each field says how to turn its feature off.
type Options struct {
	// StageID is this endpoint's stage, NoStage ("") for a producer that
	// never calls Recv. Open refuses a malformed one (ErrBadStage). A stage
	// with wakeups on owns a FIFO, so Recv sleeps until a producer wakes it.
	StageID Stage
	// WakeupScope names the deployment; both ends of an edge must agree.
	// Empty means "no scope": names are keyed by the parent pid (SPEC §2).
	WakeupScope string
	// HostRingBytes is the ring capacity per producer and edge: 0 means
	// ring.DefaultCapacity (4 MiB), NoRing disables the ring, anything else
	// must be within ring.MinCapacity..ring.MaxCapacity.
	HostRingBytes int
	// DisableWakeups turns off the FIFOs of SPEC §8: puts wake nobody and
	// Recv polls. The environment's VLLM_OMNI_SHM_WAKEUP=0 does the same.
	DisableWakeups bool
	// PollInterval paces the polls of a waiting Recv for what no wakeup or
	// hint announced (wakeups are hints; a lost one costs latency, never a
	// payload). Without a wakeup FIFO the rings are polled at least this
	// often. With one, a single connector-wide safety re-poll of the rings
	// and of every waited key's segment starts at PollInterval and backs
	// off to 16 times it while it finds nothing, and returns to it once it
	// finds something. Zero or less means DefaultPollInterval.
	PollInterval time.Duration
	// Spin is how long Recv keeps polling the rings (no system call per
	// poll, but one pidfd poll per producer every 20 µs, so that the poll
	// that finds the frame claims it without one) after a miss before it
	// hands the wait to the connector's
	// dispatcher, when no other Recv of the connector waits (with other
	// waiters the dispatcher serves them all, and spinning would burn CPU
	// per waiter). Zero means DefaultSpin; a negative value never spins.
	Spin time.Duration
	// Logger receives the connector's warnings: one per edge whose ring
	// cannot be set up, a wakeup FIFO or crash watchdog that is unavailable,
	// inotify that is (the connector polls instead; said once).
	// Nil means slog.Default(); slog.New(slog.DiscardHandler) silences them.
	// Errors are returned, never logged.
	Logger *slog.Logger
}

// resolve checks o and fills its defaults: what Open runs on.
func (o Options) resolve() (Options, error) {
	if o.StageID != NoStage {
		if _, err := ParseStage(string(o.StageID)); err != nil {
			return o, fmt.Errorf("connector: Options.StageID: %w", err)
		}
	}
	switch o.HostRingBytes {
	case 0:
		o.HostRingBytes = ring.DefaultCapacity
	case NoRing:
		o.HostRingBytes = 0 // the ring package's "disabled"
	default:
		if err := ring.CheckCapacity(o.HostRingBytes); err != nil {
			return o, fmt.Errorf("connector: Options.HostRingBytes: %w (NoRing disables the ring)", err)
		}
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Spin == 0 {
		o.Spin = DefaultSpin
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Stage is a stage id as the protocol writes it (SPEC §1): ASCII decimal
// digits, the string form of vLLM-Omni's integer stage ids. It names the
// ends of an edge, the ring files of that edge and the wakeup FIFOs of the
// receiving stage (SPEC §2, §8). ParseStage is its one validator.
type Stage string

// NoStage is Options.StageID of an endpoint that only puts.
const NoStage Stage = ""

// ParseStage returns s as a Stage. Anything but one or more ASCII decimal
// digits (so "" too) is refused with an error wrapping ErrBadStage.
func ParseStage(s string) (Stage, error) {
	if !scope.IsNumeric(s) {
		return NoStage, fmt.Errorf("%w %q: want ASCII decimal digits", ErrBadStage, s)
	}
	return Stage(s), nil
}

// edgeError refuses an edge with an empty end, which is always a mistake
// (an unset variable): any other string may name a stage of Put, Get and
// Recv, and a non-numeric one takes the per-key path (SPEC §9).
func edgeError(op, key, from, to string) error {
	if from != "" && to != "" {
		return nil
	}
	return fmt.Errorf("connector: %s %q: %w: empty stage id in edge %q->%q", op, keys.Shorten(key), ErrBadStage, from, to)
}

// numeric reports whether a stage string of Put or Get may use the ring:
// both ends of an edge must be stages (SPEC §9); other strings are allowed
// there and take the per-key path.
func numeric(stage string) bool { return scope.IsNumeric(stage) }
