//go:build linux

package bench

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"omnishm/config"
	"omnishm/ring"
	"omnishm/tensor"
	"omnishm/wire"
)

// ErrPlan is returned by Run for a plan it cannot carry out: an unknown
// mode or transport, a transport given twice or one the mode cannot time,
// a negative count, a field the mode does not use, a payload that has no
// msgpack form. Run returns it before it starts anything.
var ErrPlan = errors.New("bench: bad plan")

// Mode is how Run measures.
type Mode string

const (
	// Latency puts in this process while a receiver process blocks in Recv
	// (woken by the FIFOs of SPEC §8) and reports the host-wide monotonic
	// time of each arrival, which also paces the next put: one message in
	// flight. Results carry VsUDS.
	Latency Mode = "latency"
	// Pair puts then gets in this process: the mean is µs per pair. The
	// report carries the floor measured in the same run (Report.Flock, the
	// memcpy rows) and every pair's ratio to it, to the flock floor timed
	// after each of its samples (Result.FlockUs).
	Pair Mode = "pair"
	// Stream puts Count messages in this process with up to Plan.Window in
	// flight while a receiver process drains them in order, and checks that
	// every one arrived exactly once. Results are msgs/s and bytes/s; VsUDS
	// is the rate over the socket's at the same size.
	Stream Mode = "stream"
	// Fanout blocks Plan.Waiters goroutines of a receiver process at once,
	// each waiting for a key of its own on edge 0->1, measures that
	// process's CPU over an idle window and its OS threads, then puts the
	// keys one by one from this process, each after the previous one was
	// delivered, and measures the receiver's CPU per delivery; then it
	// puts pipelined rounds (every waiter re-arms on a new key as its
	// message arrives, two rounds in flight) and measures the CPU per
	// delivery over many, without a harness round trip per message. The
	// report is Report.Fanout, beside Report.Flock.
	Fanout Mode = "fanout"
)

// Modes lists the modes Run knows, in the order a usage message names them.
func Modes() []Mode { return slices.Clone(modeOrder) }

// Transports a plan can time. Nats is package natsconn, over
// Plan.Nats.URL or an embedded server. UDS is the baseline: the same
// serialized bytes through a Unix-domain stream socket.
const (
	Ring   = "ring"
	PerKey = "perkey"
	Nats   = "nats"
	UDS    = "uds"
)

// Transports lists every transport, in the order Run times them by default.
func Transports() []string { return []string{Ring, PerKey, Nats, UDS} }

// Floor rows: what a result is measured against, in the same run.
const (
	// Memcpy names the row of two plain copies of a payload's msgpack form
	// (the bytes the uds baseline moves), one per payload, after the
	// transports' rows in latency, pair and stream reports.
	Memcpy = "memcpy"
	// ShmFile names the row of what SPEC §6 has every per-key publication
	// do to the file system, alone: create a fresh /dev/shm file, write the
	// payload's msgpack form into it and close it, open it, read it into
	// memory of its own, unlink and close it; no lock file, wakeup, claim
	// or other process. One per payload, after the memcpy rows, in latency
	// and pair reports that time perkey: the per-key path's floor.
	ShmFile = "shmfile"
	// Flock names Report.Flock: two uncontended flock pairs (LOCK_EX, then
	// LOCK_UN) on a /dev/shm file, the locking one put+get must do (SPEC
	// §3).
	Flock = "flock"
)

// What the goroutines of a fanout plan block in.
const (
	WaitRecv   = "recv"   // connector.SHM.Recv on a key of their own
	WaitReader = "reader" // stream.Reader.Next, one request each
)

// WaitKinds lists what fanout waiters may block in, in the order Run
// measures them by default.
func WaitKinds() []string { return []string{WaitRecv, WaitReader} }

// Payload is one payload to time and the size it is reported under.
type Payload struct {
	// Size is the size reported; 0 means the length of the payload's
	// msgpack form (SPEC §5), which is also what the uds baseline moves.
	Size  int
	Value any
}

// TensorPayloads makes one payload per size: a float32 tensor of that
// many bytes (a multiple of 4) under the key "data", reported under that
// size.
func TensorPayloads(sizes []int) ([]Payload, error) {
	var out []Payload
	for _, size := range sizes {
		if size <= 0 || size%4 != 0 {
			return nil, fmt.Errorf("%s is not a whole number of float32 values (a multiple of 4)", FormatSize(size))
		}
		values := make([]float32, size/4)
		// One period of the pattern, then doubling copies: a 16 MiB tensor
		// costs a few memmoves, not four million conversions.
		const period = 1000
		for i := range min(period, len(values)) {
			values[i] = float32(i) * 0.5
		}
		for n := period; n < len(values); n *= 2 {
			copy(values[n:], values[:n])
		}
		t, err := tensor.FromSlice(values, len(values))
		if err != nil {
			return nil, err
		}
		out = append(out, Payload{Size: size, Value: map[string]any{"data": t}})
	}
	return out, nil
}

// defaultSizes are the tensor sizes a plan without payloads times.
var defaultSizes = []int{512, 4 << 10, 64 << 10, 1 << 20}

// Defaults of a plan's zero fields, and bounds.
const (
	defaultCount   = 1000
	defaultWindow  = 256
	defaultWaiters = 50
	defaultIdle    = 2 * time.Second
	// maxWaiters bounds a fanout: today's Recv holds an OS thread per
	// waiter, and a Go process stops at 10000 threads unless told more.
	maxWaiters = 10000
	// streamBytes is what a stream cell moves by default (between
	// minStreamCount and maxStreamCount messages), and maxInFlight the
	// payload bytes it lets be in flight at once, so that a stream of
	// 16 MiB payloads does not fill /dev/shm.
	streamBytes    = 256 << 20
	minStreamCount = 100
	maxStreamCount = 20000
	maxInFlight    = 64 << 20
)

// Plan is what one Run measures: every transport, in order, with every
// payload. The zero Plan times latency for DefaultSizes over every
// transport, 1000 messages each, of float32 tensors of 512 bytes, 4 KiB,
// 64 KiB and 1 MiB.
type Plan struct {
	Mode     Mode      // "" means Latency
	Payloads []Payload // nil means tensors of 512 B, 4 KiB, 64 KiB, 1 MiB (fanout: 512 B)
	// Transports nil means Transports() (fanout: ring and perkey, the
	// transports it can time; nats is for latency, pair and stream).
	Transports []string
	// Count is the number of timed messages per transport and payload; 0
	// means 1000, and in stream mode 256 MiB worth (100..20000). Fanout
	// delivers one message per waiter, then its pipelined rounds, and takes
	// none.
	Count int
	// Warmup messages precede the timed ones, untimed; 0 means
	// min(Count, 20), negative none.
	Warmup int
	// Nats are the nats transport's settings, as a NatsConnector's extra
	// has them; a plan that does not time nats has none. URL "" means a server Run starts in this process for the
	// run when nats is timed (natsconn.StartEmbedded: a loopback port,
	// JetStream in a temporary directory it removes).
	Nats config.Nats
	// RingBytes is the host ring capacity of the ring transport; 0 means
	// the connector's default (4 MiB). A frame over a quarter of it goes
	// per-key: the result is then named ring->perkey (or ring+perkey).
	RingBytes int
	// Window bounds a stream's messages in flight (put and not yet
	// received); 0 means 256. Run lowers it for a payload so that the
	// window fits half the ring (when the ring is timed and takes the
	// payload) and 64 MiB, and uses the same window for every transport
	// of that payload. Stream mode only.
	Window int
	// Waiters is the number of goroutines a fanout blocks at once; 0 means
	// 50, at most 10000. Fanout mode only.
	Waiters int
	// WaitIn lists what a fanout's waiters block in (WaitKinds); nil means
	// all of them, each a result of its own. WaitReader needs payloads
	// that are maps (chunks). Fanout mode only.
	WaitIn []string
	// Idle is how long a fanout measures its idle waiters, after letting
	// them settle for a quarter of that; 0 means 2s. Fanout mode only.
	Idle time.Duration
	// Supplied makes the shared-memory transports' receives decode into
	// one recycled buffer per cell (connector.SHM's GetInto and RecvInto
	// with a frame.Arena) instead of memory allocated per message.
	// Latency, pair and stream modes.
	Supplied bool
	// Pin runs this process on one CPU and the receiver process on
	// another (every thread of each), so the scheduler cannot run the two
	// on one CPU: each message then crosses CPUs, as between stages of a
	// pipeline on cores of their own. It needs two CPUs. Modes with a
	// receiver process only (latency, stream, fanout).
	Pin bool
	// Scope is the wakeup scope of the run; empty means a fresh one.
	Scope string
	// KeyPrefix starts every key of the run, and the name of the flock
	// floor's file in /dev/shm; empty means one of this process's own.
	KeyPrefix string
	// Progress, when set, is called from Run's goroutine after every
	// message and once more at the end of each (transport, payload) run.
	Progress func(Progress)
}

// Progress is where a Run stands.
type Progress struct {
	Transport   string // as planned: ring, perkey, uds, or memcpy
	WaitIn      string // fanout: what the waiters block in
	Size        int
	Done, Total int // messages sent (warm-up included) of the whole plan
	// Result is set on the last call of a (transport, payload) run: what
	// it measured (Fanout instead in fanout mode). The caller must not
	// change it.
	Result *Result
	Fanout *FanoutResult
}

// resolve fills in the defaults and checks the plan; it returns the
// msgpack form of every payload, index for index.
func (p Plan) resolve() (Plan, [][]byte, error) {
	if p.Mode == "" {
		p.Mode = Latency
	}
	m, ok := modes[p.Mode]
	if !ok {
		return p, nil, fmt.Errorf("%w: unknown mode %q (want %v)", ErrPlan, p.Mode, modeOrder)
	}
	if p.Transports == nil {
		p.Transports = m.transports
	}
	p.Transports = slices.Clone(p.Transports)
	if err := checkList("transport", p.Transports, Transports(), m.transports, p.Mode); err != nil {
		return p, nil, err
	}
	only := func(field string, set bool, mode Mode) error {
		if set && p.Mode != mode {
			return fmt.Errorf("%w: %s is for %s mode, not %s", ErrPlan, field, mode, p.Mode)
		}
		return nil
	}
	switch {
	case p.Count < 0:
		return p, nil, fmt.Errorf("%w: count %d", ErrPlan, p.Count)
	case p.Count > 0 && p.Mode == Fanout:
		return p, nil, fmt.Errorf("%w: fanout delivers one message per waiter: it takes no count", ErrPlan)
	case p.Supplied && p.Mode == Fanout:
		return p, nil, fmt.Errorf("%w: fanout receives no payload worth supplying memory for", ErrPlan)
	case p.Window < 0:
		return p, nil, fmt.Errorf("%w: window %d", ErrPlan, p.Window)
	case p.Waiters < 0 || p.Waiters > maxWaiters:
		return p, nil, fmt.Errorf("%w: %d waiters (want 1..%d)", ErrPlan, p.Waiters, maxWaiters)
	case p.Idle < 0:
		return p, nil, fmt.Errorf("%w: idle window %v", ErrPlan, p.Idle)
	case p.Pin && !m.receiver:
		return p, nil, fmt.Errorf("%w: pin is for the modes with a receiver process, not %s", ErrPlan, p.Mode)
	case p.Nats != (config.Nats{}) && !slices.Contains(p.Transports, Nats):
		return p, nil, fmt.Errorf("%w: NATS settings, but nats is not among the transports timed", ErrPlan)
	}
	for _, err := range []error{
		only("a window", p.Window > 0, Stream),
		only("waiters", p.Waiters > 0, Fanout),
		only("wait-in", p.WaitIn != nil, Fanout),
		only("an idle window", p.Idle > 0, Fanout),
	} {
		if err != nil {
			return p, nil, err
		}
	}
	if p.Mode == Fanout {
		p.Waiters = cmp.Or(p.Waiters, defaultWaiters)
		p.Idle = cmp.Or(p.Idle, defaultIdle)
		if p.WaitIn == nil {
			p.WaitIn = WaitKinds()
		}
		p.WaitIn = slices.Clone(p.WaitIn)
		if err := checkList("wait-in", p.WaitIn, WaitKinds(), WaitKinds(), p.Mode); err != nil {
			return p, nil, err
		}
	}
	p.Window = cmp.Or(p.Window, defaultWindow)
	p.RingBytes = cmp.Or(p.RingBytes, ring.DefaultCapacity)
	if p.Scope == "" {
		p.Scope = fmt.Sprintf("omnishm-bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	if p.KeyPrefix == "" {
		p.KeyPrefix = fmt.Sprintf("omnishm_bench_%d_", os.Getpid())
	}
	if p.Payloads == nil {
		var err error
		if p.Payloads, err = TensorPayloads(m.sizes); err != nil {
			return p, nil, err
		}
	}
	p.Payloads = slices.Clone(p.Payloads)
	forms := make([][]byte, len(p.Payloads))
	for i := range p.Payloads {
		if _, ok := p.Payloads[i].Value.(map[string]any); !ok && slices.Contains(p.WaitIn, WaitReader) {
			return p, nil, fmt.Errorf("%w: payload %d: reader waiters receive chunks, which are maps, not %T", ErrPlan, i, p.Payloads[i].Value)
		}
		b, err := wire.Marshal(p.Payloads[i].Value)
		if err != nil {
			return p, nil, fmt.Errorf("%w: payload %d: %w", ErrPlan, i, err)
		}
		forms[i] = b
		if p.Payloads[i].Size == 0 {
			p.Payloads[i].Size = len(b)
		}
	}
	return p, forms, nil
}

// checkList checks a list of names: each known, usable by the mode, and
// given once.
func checkList(what string, list, known, usable []string, mode Mode) error {
	for i, s := range list {
		switch {
		case !slices.Contains(known, s):
			return fmt.Errorf("%w: unknown %s %q (want one of %v)", ErrPlan, what, s, known)
		case !slices.Contains(usable, s):
			return fmt.Errorf("%w: %s mode cannot time %s %q (want one of %v)", ErrPlan, mode, what, s, usable)
		case slices.Contains(list[:i], s):
			return fmt.Errorf("%w: %s %q given twice", ErrPlan, what, s)
		}
	}
	return nil
}

// count is the number of timed messages of a payload of size bytes.
func (p Plan) count(size int) int {
	switch {
	case p.Count > 0:
		return p.Count
	case p.Mode == Stream:
		return min(max(streamBytes/max(size, 1), minStreamCount), maxStreamCount)
	}
	return defaultCount
}

// warmup is the number of untimed messages before count timed ones.
func (p Plan) warmup(count int) int {
	switch {
	case p.Warmup == 0:
		return min(count, 20)
	case p.Warmup < 0:
		return 0
	}
	return p.Warmup
}

// frameSlack bounds what a ring frame adds to a tensor payload: msgpack
// or tensor-frame headers, frame header, key, alignment (SPEC §3, §4).
const frameSlack = 512

// window is the stream window of a payload of size bytes: Window, at
// most maxInFlight bytes, and at most half the ring when the ring is
// timed and takes the payload. Every transport streams the payload with
// the same window.
func (p Plan) window(size int) int {
	w := min(p.Window, max(1, maxInFlight/max(size, 1)))
	if slices.Contains(p.Transports, Ring) && size+frameSlack <= p.RingBytes/4 {
		w = min(w, max(1, p.RingBytes/2/(size+frameSlack)))
	}
	return w
}
