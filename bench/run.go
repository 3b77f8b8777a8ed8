//go:build linux

package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"omnishm/connector"
	"omnishm/internal/hostclock"
)

// Bench edges: numeric stage ids, so the ring and wakeups are used.
const benchFrom, benchTo = "0", "1"

// mode is one way of measuring. Run measures every (transport, payload)
// cell of a plan with its mode's cell function, which adds what it
// measured to the report; a new mode is one more entry in modes (and
// modeOrder), with a request mode of its own should its receiver serve a
// cell differently.
type mode struct {
	// receiver: the mode needs the receiver process (receiver.go), started
	// once for the whole run, or with freshReceiver anew for every cell:
	// Go keeps the OS threads it started, so a cell's thread count would
	// include those an earlier cell needed.
	receiver, freshReceiver bool
	// transports are those the mode can time, and a plan's default.
	transports []string
	// sizes are the tensor sizes of a plan without payloads.
	sizes []int
	// flock: the report carries the flock floor, measured first; memcpy:
	// a memcpy row per payload follows the transports' rows; shmFile: so
	// does a shmfile row per payload when the plan times perkey.
	flock, memcpy, shmFile bool
	// cell measures one transport and payload (and kind of waiter).
	cell func(r *runner, c *cell) error
	// finish completes the report once everything is measured.
	finish func(*Report)
}

var modes = map[Mode]mode{
	Latency: {receiver: true, transports: Transports(), sizes: defaultSizes, memcpy: true, shmFile: true, cell: timeLatency,
		finish: func(r *Report) { CompareToUDS(r.measured(), UDS) }},
	Pair: {transports: Transports(), sizes: defaultSizes, flock: true, memcpy: true, shmFile: true, cell: timePair,
		finish: compareToFloor},
	Stream: {receiver: true, transports: Transports(), sizes: defaultSizes, memcpy: true, cell: timeStream,
		finish: func(r *Report) { compareRates(r.measured(), UDS) }},
	Fanout: {receiver: true, freshReceiver: true, transports: []string{Ring, PerKey}, sizes: []int{512}, flock: true, cell: timeFanout,
		finish: fanoutInFlockPairs},
}

var modeOrder = []Mode{Latency, Pair, Stream, Fanout}

// runner is one Run under way.
type runner struct {
	ctx         context.Context
	plan        Plan
	mode        mode
	forms       [][]byte  // msgpack form of each payload
	peer        *receiver // the receiver process, for modes that have one
	report      Report
	run         int        // cells measured so far: each has keys of its own
	done, total int        // messages sent so far, of the plan
	unpin       func()     // undoes this process's pinning (Plan.Pin), once pinned
	flock       *flockFile // the flock floor's file, in modes that have one
}

// cell is one (transport, payload, kind of waiter) measurement.
type cell struct {
	transport string
	waitIn    string // fanout only
	payload   Payload
	form      []byte             // the payload's msgpack form
	run       int                // names the cell's keys
	conn      connector.Receiver // nil for uds and the floor rows
	count     int                // timed messages
	warmup    int                // untimed ones before them
	floors    []time.Duration    // pair: the flock floor after each timed message
	sends     []time.Duration    // latency: how long each timed message's send took
}

// Run measures plan and returns the report (the caller's), in plan order
// (transports outer, payloads inner, the floor rows last: memcpy, then shmfile). A plan timing
// nats over no given server runs one in this process for its duration. A mode with a
// receiver runs it as a child process of this same executable (package
// internal/reexec), which has the role because it links this package.
// When ctx ends, Run stops the receiver and returns what it measured so
// far with ctx's error.
func Run(ctx context.Context, plan Plan) (Report, error) {
	plan, forms, err := plan.resolve()
	if err != nil {
		return Report{}, err
	}
	stopNats, err := plan.startNats()
	if err != nil {
		return Report{}, err
	}
	defer stopNats() // after the receiver's end: its connectors close first
	r := &runner{ctx: ctx, plan: plan, mode: modes[plan.Mode], forms: forms, report: Report{Mode: string(plan.Mode)}}
	for _, c := range r.cells() {
		r.total += c.warmup + c.count
	}
	defer func() {
		if r.unpin != nil {
			r.unpin()
		}
	}()
	if r.mode.receiver && !r.mode.freshReceiver {
		if r.peer, err = r.startPeer(); err != nil {
			return Report{}, err
		}
		defer r.peer.stop()
	}
	if err := r.measure(); err != nil {
		return r.report, err
	}
	if r.mode.finish != nil {
		r.mode.finish(&r.report)
	}
	if r.peer != nil {
		return r.report, r.peer.finish(ctx)
	}
	return r.report, nil
}

// startPeer starts a receiver process and, under Plan.Pin, puts it on a
// CPU of its own and this process (once) on another.
func (r *runner) startPeer() (*receiver, error) {
	peer, err := startReceiver()
	if err != nil || !r.plan.Pin {
		return peer, err
	}
	cpus, err := pinCPUs()
	if err == nil && r.unpin == nil {
		r.unpin, err = pinProcess(0, cpus[0])
	}
	if err == nil {
		_, err = pinProcess(peer.child.Pid(), cpus[1])
	}
	if err != nil {
		peer.stop()
		return nil, err
	}
	r.report.Pinned = cpus[:]
	return peer, nil
}

// cells lists the plan's cells in the order they are measured, without
// connectors.
func (r *runner) cells() []*cell {
	waitIn := r.plan.WaitIn
	if r.plan.Mode != Fanout {
		waitIn = []string{""}
	}
	var out []*cell
	add := func(transport, wait string, i int) {
		c := &cell{transport: transport, waitIn: wait, payload: r.plan.Payloads[i], form: r.forms[i]}
		if r.plan.Mode == Fanout {
			c.count = r.plan.Waiters // one delivery each, nothing to warm up
		} else {
			c.count = r.plan.count(c.payload.Size)
			c.warmup = r.plan.warmup(c.count)
		}
		out = append(out, c)
	}
	for _, t := range r.plan.Transports {
		for _, w := range waitIn {
			for i := range r.plan.Payloads {
				add(t, w, i)
			}
		}
	}
	if r.mode.memcpy {
		for i := range r.plan.Payloads {
			add(Memcpy, "", i)
		}
	}
	if r.mode.shmFile && slices.Contains(r.plan.Transports, PerKey) {
		for i := range r.plan.Payloads {
			add(ShmFile, "", i)
		}
	}
	return out
}

// measure measures every cell into r.report, after the flock floor when
// the mode has one. A connector serves every cell of its transport.
func (r *runner) measure() error {
	if r.mode.flock {
		ff, err := r.openFlockFile()
		if err != nil {
			return err
		}
		defer ff.close()
		r.flock = ff
		f, err := r.flockFloor(ff)
		if err != nil {
			return err
		}
		r.report.Flock = &f
	}
	conns := map[string]connector.Receiver{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, c := range r.cells() {
		r.run++
		c.run = r.run
		measure := r.mode.cell
		switch c.transport {
		case Memcpy:
			measure = timeMemcpy
		case ShmFile:
			measure = timeShmFile
		case UDS:
		default:
			if c.conn = conns[c.transport]; c.conn == nil {
				conn, err := r.plan.endpoints().open(c.transport, "")
				if err != nil {
					return err
				}
				conns[c.transport], c.conn = conn, conn
			}
		}
		var err error
		if r.mode.freshReceiver {
			err = r.withReceiver(func() error { return measure(r, c) })
		} else {
			err = measure(r, c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// withReceiver runs f with a receiver process of its own.
func (r *runner) withReceiver(f func() error) error {
	peer, err := r.startPeer()
	if err != nil {
		return err
	}
	r.peer = peer
	defer func() { r.peer = nil }()
	if err := f(); err != nil {
		peer.stop()
		return err
	}
	return peer.finish(r.ctx)
}

// request is what the receiver process needs to serve cell c in mode,
// but the counts of messages.
func (r *runner) request(mode Mode, c *cell) request {
	return request{Mode: mode, Transport: c.transport, endpointSettings: r.plan.endpoints(), KeyPrefix: r.plan.KeyPrefix, Run: c.run}
}

// key names message i of one cell; keys are never reused, so a late claim
// cannot be confused with a later message.
func key(prefix string, run, i int) string { return numbered(prefix, run, '_', i) }

// numbered is prefix, run, sep and i, built in one allocation: the
// receiver of a fanout builds a key per delivery, and strconv.Itoa of a
// number past 99 plus the concatenation were two (harness work that a
// stage naming its own keys need not repeat).
func numbered(prefix string, run int, sep byte, i int) string {
	var buf [64]byte
	b := append(buf[:0], prefix...)
	b = strconv.AppendInt(b, int64(run), 10)
	b = append(b, sep)
	return string(strconv.AppendInt(b, int64(i), 10))
}

// step reports one more message of c sent.
func (r *runner) step(c *cell) {
	r.done++
	if r.plan.Progress != nil {
		r.plan.Progress(Progress{Transport: c.transport, WaitIn: c.waitIn, Size: c.payload.Size, Done: r.done, Total: r.total})
	}
}

// add adds a cell's result to the report and reports it.
func (r *runner) add(c *cell, res Result) {
	r.report.Results = append(r.report.Results, res)
	if r.plan.Progress != nil {
		r.plan.Progress(Progress{Transport: c.transport, Size: c.payload.Size, Done: r.done, Total: r.total, Result: &res})
	}
}

// carried names a ring cell's result for what carried its puts since
// before, from the connector's Health counters: ring, ring->perkey (every
// put went per-key) or ring+perkey; it returns the name and the number of
// puts that went per-key.
func (c *cell) carried(before connector.Health) (string, int) {
	if c.conn == nil || c.transport != Ring {
		return c.transport, 0
	}
	after := c.conn.Health()
	fallbacks := int(after.HostRingFallbacks - before.HostRingFallbacks)
	switch ring := after.HostRingPuts - before.HostRingPuts; {
	case fallbacks > 0 && ring == 0:
		return Ring + "->" + PerKey, fallbacks
	case fallbacks > 0:
		return Ring + "+" + PerKey, fallbacks
	}
	return Ring, 0
}

// health is the cell's connector's counters, zero without one.
func (c *cell) health() connector.Health {
	if c.conn == nil {
		return connector.Health{}
	}
	return c.conn.Health()
}

// timeEach sends a cell's warm-up and timed messages one at a time through
// send, which returns each message's latency, and adds the summary of the
// timed ones to the report.
func (r *runner) timeEach(c *cell, send func(i int) (time.Duration, error)) error {
	var before connector.Health
	lat := make([]time.Duration, 0, c.count)
	for i := range c.warmup + c.count {
		if i == c.warmup {
			before = c.health()
		}
		if err := r.ctx.Err(); err != nil {
			return err
		}
		d, err := send(i)
		if err != nil {
			return err
		}
		if i >= c.warmup {
			lat = append(lat, d)
		}
		r.step(c)
	}
	res := Summarize(c.transport, c.payload.Size, lat)
	res.Transport, res.Fallbacks = c.carried(before)
	r.add(c, res)
	return nil
}

// timeLatency is a latency cell: this process puts (or writes the socket),
// the receiver process stamps each arrival.
func timeLatency(r *runner, c *cell) error {
	req := r.request(Latency, c)
	req.Messages, req.Size = c.warmup+c.count, len(c.form)
	err := r.peer.request(req)
	if err != nil {
		return err
	}
	send := r.sender(c)
	c.sends = make([]time.Duration, 0, c.count)
	err = r.timeEach(c, func(i int) (time.Duration, error) {
		k := key(r.plan.KeyPrefix, c.run, i)
		t0 := hostclock.Now()
		if err := send(k, i); err != nil {
			return 0, err
		}
		// Stamped after the send, while the receiver takes the message:
		// the arrival's stamp is the receiver's, so this adds nothing to
		// the latency.
		if i >= c.warmup {
			c.sends = append(c.sends, hostclock.Now()-t0)
		}
		t1, err := r.peer.arrival(r.ctx)
		return t1 - t0, err
	})
	if err == nil && len(c.sends) > 0 {
		r.report.Results[len(r.report.Results)-1].SendUs = Summarize(c.transport, 0, c.sends).P50Us
	}
	return err
}

// sender returns what sends message i of a cell, under key k, to the
// receiver process: a put, or a write of the socket from a frame built once
// (no per-message copy is timed). Callers make k first: the key is not the
// transport's work.
func (r *runner) sender(c *cell) func(k string, i int) error {
	if c.conn == nil {
		frame := newUDSFrame(c.form)
		return func(_ string, i int) error { return r.peer.sendUDS(frame.stamp(i)) }
	}
	return func(k string, _ int) error {
		_, _, err := c.conn.Put(benchFrom, benchTo, k, c.payload.Value)
		return err
	}
}

// timePair is a pair cell: put then get in this process, or one round
// through a socket pair, each followed by a sample of the flock floor.
func timePair(r *runner, c *cell) error {
	if c.conn == nil {
		loop, err := newUDSLoop(len(c.form))
		if err != nil {
			return err
		}
		defer loop.close()
		frame := newUDSFrame(c.form)
		return r.timePairs(c, func(i int) (time.Duration, error) {
			b := frame.stamp(i)
			t0 := hostclock.Now()
			err := loop.roundTrip(b)
			return hostclock.Now() - t0, err
		})
	}
	into, mem := r.plan.endpoints().supplied(c.conn, len(c.form))
	return r.timePairs(c, func(i int) (time.Duration, error) {
		k := key(r.plan.KeyPrefix, c.run, i) // the floor makes no string either
		t0 := hostclock.Now()
		err := pair(c.conn, into, mem, k, c.payload.Value)
		return hostclock.Now() - t0, err
	})
}

// timePairs is timeEach with the flock floor timed after each sample; the
// cell's result gets the floor's p50 (Result.FlockUs).
func (r *runner) timePairs(c *cell, send func(i int) (time.Duration, error)) error {
	if err := r.timeEach(c, r.interleaveFloor(c, send)); err != nil {
		return err
	}
	if len(c.floors) > 0 {
		r.report.Results[len(r.report.Results)-1].FlockUs = Summarize(Flock, 0, c.floors).P50Us
	}
	return nil
}

// pair is one put and the get that claims it, into mem through into when
// the plan supplies memory.
func pair(conn connector.Transport, into connector.IntoReceiver, mem *recycled, key string, v any) error {
	if _, _, err := conn.Put(benchFrom, benchTo, key, v); err != nil {
		return err
	}
	var ok bool
	var err error
	if into != nil {
		_, ok, err = into.GetInto(benchFrom, benchTo, key, nil, mem.next())
	} else {
		_, _, ok, err = conn.Get(benchFrom, benchTo, key, nil)
	}
	if err == nil && !ok {
		err = fmt.Errorf("get %q missed right after its put", key)
	}
	return err
}
