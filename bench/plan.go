package bench

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"omnishm/ring"
	"omnishm/tensor"
	"omnishm/wire"
)

// ErrPlan is returned by Run for a plan it cannot carry out: an unknown
// mode or transport, a transport given twice, a negative count, a payload
// that has no msgpack form.
var ErrPlan = errors.New("bench: bad plan")

// Mode is how Run measures.
type Mode string

const (
	// Latency puts in this process while a receiver process blocks in Recv
	// (woken by the FIFOs of SPEC §8) and reports the host-wide monotonic
	// time of each arrival, which also paces the next put: one message in
	// flight. Results carry VsUDS.
	Latency Mode = "latency"
	// Pair puts then gets in this process: the mean is µs per pair.
	Pair Mode = "pair"
)

// Modes lists the modes Run knows, in the order a usage message names them.
func Modes() []Mode { return slices.Clone(modeOrder) }

// Transports a plan can time. UDS is the baseline: the same serialized
// bytes through a Unix-domain stream socket.
const (
	Ring   = "ring"
	PerKey = "perkey"
	UDS    = "uds"
)

// Transports lists every transport, in the order Run times them by default.
func Transports() []string { return []string{Ring, PerKey, UDS} }

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
		for i := range values {
			values[i] = float32(i%1000) * 0.5
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

// Plan is what one Run measures: every transport, in order, with every
// payload. The zero Plan times latency for DefaultSizes over every
// transport, 1000 messages each, of float32 tensors of 512 bytes, 4 KiB,
// 64 KiB and 1 MiB.
type Plan struct {
	Mode       Mode      // "" means Latency
	Payloads   []Payload // nil means tensors of 512 B, 4 KiB, 64 KiB, 1 MiB
	Transports []string  // nil means Transports()
	Count      int       // timed messages per transport and payload; 0 means 1000
	// Warmup messages precede the timed ones, untimed; 0 means
	// min(Count, 20), negative none.
	Warmup int
	// RingBytes is the host ring capacity of the ring transport; 0 means
	// the connector's default (4 MiB). A frame over a quarter of it goes
	// per-key: the result is then named ring->perkey (or ring+perkey).
	RingBytes int
	// Scope is the wakeup scope of the run; empty means a fresh one.
	Scope string
	// KeyPrefix starts every key of the run; empty means one of this
	// process's own.
	KeyPrefix string
	// Progress, when set, is called from Run's goroutine after every
	// message and once more at the end of each (transport, payload) run.
	Progress func(Progress)
}

// Progress is where a Run stands.
type Progress struct {
	Transport   string // as planned: ring, perkey, uds
	Size        int
	Done, Total int // messages sent (warm-up included) of the whole plan
	// Result is set on the last call of a (transport, payload) run: what
	// it measured. The caller must not change it.
	Result *Result
}

// resolve fills in the defaults and checks the plan; it returns the
// msgpack form of every payload, index for index.
func (p Plan) resolve() (Plan, [][]byte, error) {
	if p.Mode == "" {
		p.Mode = Latency
	}
	if _, ok := modes[p.Mode]; !ok {
		return p, nil, fmt.Errorf("%w: unknown mode %q (want %v)", ErrPlan, p.Mode, modeOrder)
	}
	if p.Transports == nil {
		p.Transports = Transports()
	}
	for i, t := range p.Transports {
		switch {
		case !slices.Contains(Transports(), t):
			return p, nil, fmt.Errorf("%w: unknown transport %q (want ring, perkey, uds)", ErrPlan, t)
		case slices.Contains(p.Transports[:i], t):
			return p, nil, fmt.Errorf("%w: transport %q given twice", ErrPlan, t)
		}
	}
	switch {
	case p.Count < 0:
		return p, nil, fmt.Errorf("%w: count %d", ErrPlan, p.Count)
	case p.Count == 0:
		p.Count = 1000
	}
	switch {
	case p.Warmup == 0:
		p.Warmup = min(p.Count, 20)
	case p.Warmup < 0:
		p.Warmup = 0
	}
	if p.RingBytes == 0 {
		p.RingBytes = ring.DefaultCapacity
	}
	if p.Scope == "" {
		p.Scope = fmt.Sprintf("omnishm-bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	if p.KeyPrefix == "" {
		p.KeyPrefix = fmt.Sprintf("omnishm_bench_%d_", os.Getpid())
	}
	if p.Payloads == nil {
		var err error
		if p.Payloads, err = TensorPayloads(defaultSizes); err != nil {
			return p, nil, err
		}
	}
	p.Payloads = slices.Clone(p.Payloads)
	forms := make([][]byte, len(p.Payloads))
	for i := range p.Payloads {
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
