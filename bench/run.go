package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"omnishm/connector"
	"omnishm/internal/hostclock"
)

// Bench edges: numeric stage ids, so the ring and wakeups are used.
const benchFrom, benchTo = "0", "1"

// mode is one way of measuring. Run times every (transport, payload) cell
// of a plan with its mode's cell function; a new mode is one more entry in
// modes (and modeOrder), with a request field of its own should its
// receiver serve a cell differently.
type mode struct {
	// receiver: the mode needs the receiver process (receiver.go), started
	// once for the whole run.
	receiver bool
	// cell measures one transport and payload.
	cell func(r *runner, c *cell) (Result, error)
	// finish completes the results once every cell is measured.
	finish func([]Result)
}

var modes = map[Mode]mode{
	Latency: {receiver: true, cell: timeLatency, finish: func(rs []Result) { CompareToUDS(rs, UDS) }},
	Pair:    {cell: timePair},
}

var modeOrder = []Mode{Latency, Pair}

// runner is one Run under way.
type runner struct {
	ctx         context.Context
	plan        Plan
	forms       [][]byte  // msgpack form of each payload
	peer        *receiver // the receiver process, for modes that have one
	run         int       // cells measured so far: each has keys of its own
	done, total int       // messages sent so far, of the plan
}

// cell is one (transport, payload) measurement.
type cell struct {
	transport string
	payload   Payload
	form      []byte         // the payload's msgpack form
	run       int            // names the cell's keys
	conn      *connector.SHM // nil for uds
}

// Run measures plan and returns the report (the caller's), in plan order
// (transports outer, payloads inner). A mode with a receiver runs it as a
// child process of this same executable (package internal/reexec), which
// has the role because it links this package. When ctx ends, Run stops
// the receiver and returns what it measured so far with ctx's error.
func Run(ctx context.Context, plan Plan) (Report, error) {
	plan, forms, err := plan.resolve()
	if err != nil {
		return Report{}, err
	}
	m := modes[plan.Mode]
	r := &runner{ctx: ctx, plan: plan, forms: forms,
		total: len(plan.Payloads) * len(plan.Transports) * (plan.Count + plan.Warmup)}
	if m.receiver {
		if r.peer, err = startReceiver(); err != nil {
			return Report{}, err
		}
		defer r.peer.stop()
	}
	report := Report{Mode: string(plan.Mode)}
	for _, transport := range plan.Transports {
		results, err := r.transport(m, transport)
		report.Results = append(report.Results, results...)
		if err != nil {
			return report, err
		}
	}
	if m.finish != nil {
		m.finish(report.Results)
	}
	if r.peer != nil {
		return report, r.peer.finish(ctx)
	}
	return report, nil
}

// transport measures every payload through one transport, on one
// connector.
func (r *runner) transport(m mode, transport string) ([]Result, error) {
	var conn *connector.SHM
	if transport != UDS {
		var err error
		if conn, err = open(r.plan.Scope, r.plan.RingBytes, transport, ""); err != nil {
			return nil, err
		}
		defer conn.Close()
	}
	var out []Result
	for i, p := range r.plan.Payloads {
		r.run++
		c := &cell{transport: transport, payload: p, form: r.forms[i], run: r.run, conn: conn}
		res, err := m.cell(r, c)
		if err != nil {
			return out, err
		}
		out = append(out, res)
		if r.plan.Progress != nil {
			r.plan.Progress(Progress{Transport: transport, Size: p.Size, Done: r.done, Total: r.total, Result: &res})
		}
	}
	return out, nil
}

// open opens a connector for a bench transport as stage (the producer:
// none).
func open(scope string, ringBytes int, transport, stage string) (*connector.SHM, error) {
	opts := connector.Options{StageID: connector.Stage(stage), WakeupScope: scope, HostRingBytes: connector.NoRing}
	if transport == Ring {
		opts.HostRingBytes = ringBytes
	}
	return connector.Open(opts)
}

// key names message i of one cell; keys are never reused, so a late claim
// cannot be confused with a later message.
func key(prefix string, run, i int) string {
	return prefix + strconv.Itoa(run) + "_" + strconv.Itoa(i)
}

// timeEach sends a cell's warm-up and timed messages one at a time through
// send, which returns each message's latency, and summarizes the timed
// ones. The result is named for what carried the timed puts, from the
// connector's Health counters.
func (r *runner) timeEach(c *cell, send func(i int) (time.Duration, error)) (Result, error) {
	var before connector.Health
	lat := make([]time.Duration, 0, r.plan.Count)
	for i := range r.plan.Warmup + r.plan.Count {
		if i == r.plan.Warmup && c.conn != nil {
			before = c.conn.Health()
		}
		if err := r.ctx.Err(); err != nil {
			return Result{}, err
		}
		d, err := send(i)
		if err != nil {
			return Result{}, err
		}
		if i >= r.plan.Warmup {
			lat = append(lat, d)
		}
		r.done++
		if r.plan.Progress != nil {
			r.plan.Progress(Progress{Transport: c.transport, Size: c.payload.Size, Done: r.done, Total: r.total})
		}
	}
	res := Summarize(c.transport, c.payload.Size, lat)
	if c.conn != nil && c.transport == Ring {
		after := c.conn.Health()
		res.Fallbacks = int(after.HostRingFallbacks - before.HostRingFallbacks)
		switch ring := after.HostRingPuts - before.HostRingPuts; {
		case res.Fallbacks > 0 && ring == 0:
			res.Transport = Ring + "->" + PerKey
		case res.Fallbacks > 0:
			res.Transport = Ring + "+" + PerKey
		}
	}
	return res, nil
}

// timeLatency is a latency cell: this process puts (or writes the socket),
// the receiver process stamps each arrival.
func timeLatency(r *runner, c *cell) (Result, error) {
	err := r.peer.request(request{Transport: c.transport, Scope: r.plan.Scope, RingBytes: r.plan.RingBytes,
		KeyPrefix: r.plan.KeyPrefix, Run: c.run, Messages: r.plan.Warmup + r.plan.Count, Size: len(c.form)})
	if err != nil {
		return Result{}, err
	}
	send := func(int) error { return r.peer.sendUDS(c.form) }
	if c.conn != nil {
		send = func(i int) error {
			_, _, err := c.conn.Put(benchFrom, benchTo, key(r.plan.KeyPrefix, c.run, i), c.payload.Value)
			return err
		}
	}
	return r.timeEach(c, func(i int) (time.Duration, error) {
		t0 := hostclock.Now()
		if err := send(i); err != nil {
			return 0, err
		}
		t1, err := r.peer.arrival(r.ctx)
		return t1 - t0, err
	})
}

// timePair is a pair cell: put then get in this process, or one round
// through a socket pair.
func timePair(r *runner, c *cell) (Result, error) {
	if c.conn == nil {
		loop, err := newUDSLoop(len(c.form))
		if err != nil {
			return Result{}, err
		}
		defer loop.close()
		return r.timeEach(c, func(int) (time.Duration, error) {
			t0 := hostclock.Now()
			err := loop.roundTrip(c.form)
			return hostclock.Now() - t0, err
		})
	}
	return r.timeEach(c, func(i int) (time.Duration, error) {
		t0 := hostclock.Now()
		err := pair(c.conn, key(r.plan.KeyPrefix, c.run, i), c.payload.Value)
		return hostclock.Now() - t0, err
	})
}

// pair is one put and the get that claims it.
func pair(conn *connector.SHM, key string, v any) error {
	if _, _, err := conn.Put(benchFrom, benchTo, key, v); err != nil {
		return err
	}
	_, _, ok, err := conn.Get(benchFrom, benchTo, key, nil)
	if err == nil && !ok {
		err = fmt.Errorf("get %q missed right after its put", key)
	}
	return err
}
