//go:build linux

package bench

import (
	"context"
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/connector"
	"omnishm/internal/hostclock"
	"omnishm/internal/reexec"
	"omnishm/stream"
)

// A fanout cell: the receiver process starts its waiters, lets them
// settle, measures a quiet idle window and says "cpu-ns wall-ns threads";
// then this process puts the waiters' messages one by one, each after the
// receiver said which waiter had the previous one ("i"); after the last
// the receiver notes the CPU it spent since the idle window. Then, with
// no waiter left, the harness alone: ackProbes times this process sends a
// line ("probe") and waits for the answer ("-1"), as it waits for each
// delivery's; the receiver, idle in between as between deliveries, says
// what the deliveries and what one probe cost ("cpu-ns probe-cpu-ns").
//
// Between the two, the pipelined rounds (pipedRounds): every waiter,
// once all had their first message, re-arms on a key of the next round
// each time its message arrives, and this process puts round after round
// with up to two rounds in flight; the receiver says only "r" when round r
// is complete, so over many deliveries its CPU is a delivery's, plus one
// harness round trip per round, not per message. The receiver's last line
// then carries five more numbers: the CPU of the rounds, the garbage
// collector's share of it and its cycles, and the bytes and objects the
// process allocated meanwhile (runtime/metrics): with many goroutines
// parked, each cycle scans every parked stack, and the allocations set how
// often one runs.

// ackProbes is how many round trips of the harness a fanout times.
const ackProbes = 100

const fanoutProbe = "probe"

// pipedMessages is about how many messages the pipelined rounds of a
// fanout deliver, in ten to maxPipedRounds rounds of one message per
// waiter. The first rounds cost more than the steady state (1000 waiters,
// recv, on one binary: 3.65-4.41 µs per delivery over 10 rounds, 3.2-3.4
// over 50 and over 200).
const pipedMessages = 50000

// pipedRounds is the number of pipelined rounds for n waiters of
// messages of size bytes, and how many rounds it keeps in flight: two, or
// one, or no round at all where that would put over maxInFlight bytes in
// flight (as a stream bounds its window).
func pipedRounds(n, size int) (rounds, window int) {
	switch {
	case 2*n*size <= maxInFlight:
		window = 2
	case n*size <= maxInFlight:
		window = 1
	default:
		return 0, 0
	}
	return min(maxPipedRounds, max(10, pipedMessages/n)), window
}

// maxPipedRounds bounds the rounds of a few waiters: each costs a harness
// round trip (taken out, but timed apart, and what a test of a few waiters
// waits for).
const maxPipedRounds = 1000

// fanoutRequest is the request id of waiter i of a reader fanout.
func fanoutRequest(prefix string, run, i int) string { return numbered(prefix, run, 'r', i) }

// timeFanout is a fanout cell.
func timeFanout(r *runner, c *cell) error {
	n := c.count
	req := r.request(Fanout, c)
	rounds, window := pipedRounds(n, max(c.payload.Size, len(c.form)))
	req.Messages, req.WaitIn, req.Idle, req.Rounds = n, c.waitIn, r.plan.Idle, rounds
	err := r.peer.request(req)
	if err != nil {
		return err
	}
	idle, err := r.peer.numbersWithin(r.ctx, r.plan.Idle+recvTimeout, 3)
	if err != nil {
		return err
	}
	put := func(i int) error {
		_, _, err := c.conn.Put(benchFrom, benchTo, key(r.plan.KeyPrefix, c.run, i), c.payload.Value)
		return err
	}
	var sender *stream.Sender
	if c.waitIn == WaitReader {
		if sender, err = stream.NewSender(c.conn, benchFrom, benchTo, stream.SenderOptions{}); err != nil {
			return err
		}
		defer sender.Close()
		chunk := c.payload.Value.(map[string]any) // resolve checked
		put = func(i int) error { return sender.Finish(r.ctx, fanoutRequest(r.plan.KeyPrefix, c.run, i), chunk) }
	}
	before := c.health()
	for i := range n {
		if err := put(i); err != nil {
			return err
		}
		v, err := r.peer.numbersWithin(r.ctx, recvTimeout, 1)
		if err != nil {
			if sender != nil && sender.Err() != nil {
				err = sender.Err()
			}
			return err
		}
		if int(v[0]) != i {
			return fmt.Errorf("fanout: put %d reached waiter %d", i, v[0])
		}
		r.step(c)
	}
	putRound := func(round int) error {
		for i := range n {
			if err := put(round*n + i); err != nil {
				return err
			}
		}
		return nil
	}
	// Round r is put once round r-window is complete.
	for round := 1; round <= rounds+window; round++ {
		if round > window {
			v, err := r.peer.numbersWithin(r.ctx, recvTimeout, 1)
			if err != nil {
				if sender != nil && sender.Err() != nil {
					err = sender.Err()
				}
				return err
			}
			if int(v[0]) != round-window {
				return fmt.Errorf("fanout: round %d complete, want %d", v[0], round-window)
			}
		}
		if round <= rounds {
			if err := putRound(round); err != nil {
				return err
			}
		}
	}
	for range ackProbes {
		if err := r.peer.child.Send(fanoutProbe); err != nil {
			return fmt.Errorf("receiver: %w", err)
		}
		if _, err := r.peer.numbersWithin(r.ctx, recvTimeout, 1); err != nil {
			return err
		}
	}
	delivery, err := r.peer.numbersWithin(r.ctx, recvTimeout, 7)
	if err != nil {
		return err
	}
	if sender != nil {
		if err := sender.Close(); err != nil {
			return err
		}
	}
	res := FanoutResult{WaitIn: c.waitIn, Waiters: n, Size: c.payload.Size,
		IdleS: time.Duration(idle[1]).Seconds(), Threads: int(idle[2]),
		CPUPerMsgUs: float64(delivery[0]) / float64(time.Microsecond) / float64(n),
		HarnessUs:   float64(delivery[1]) / float64(time.Microsecond), PipedRounds: rounds}
	if rounds > 0 {
		msgs := float64(rounds * n)
		res.PipedCPUPerMsgUs = float64(delivery[2]-int64(rounds)*delivery[1]) / float64(time.Microsecond) / msgs
		res.PipedGCPerMsgUs = float64(delivery[3]) / float64(time.Microsecond) / msgs
		res.PipedGCCycles = int(delivery[4])
		res.PipedAllocBytesPerMsg = float64(delivery[5]) / msgs
		res.PipedAllocsPerMsg = float64(delivery[6]) / msgs
	}
	if idle[1] > 0 {
		res.IdleCPUPct = 100 * float64(idle[0]) / float64(idle[1])
	}
	res.Transport, _ = c.carried(before)
	r.report.Fanout = append(r.report.Fanout, res)
	if r.plan.Progress != nil {
		r.plan.Progress(Progress{Transport: c.transport, WaitIn: c.waitIn, Size: c.payload.Size, Done: r.done, Total: r.total, Fanout: &res})
	}
	return nil
}

// serveFanout is the receiver's side of a fanout cell. Each waiter says
// its own "i" the moment its message arrives, as a probe's answer is said
// by the goroutine that read the probe: a delivery costs no hop to another
// goroutine that the harness's own round trip does not make.
func serveFanout(ctx context.Context, conn connector.Receiver, req request) error {
	n := req.Messages
	// Today's Recv holds an OS thread per waiter; Go stops at 10000.
	if threads := 2*n + 1000; threads > 10000 {
		debug.SetMaxThreads(threads)
	}
	var waiting, exited sync.WaitGroup
	defer exited.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before exited.Wait: the waiters still blocked return
	rounds := req.Rounds
	var (
		left     atomic.Int64
		failOnce sync.Once
		failErr  error
	)
	// roundLeft[r] counts the waiters still to have their message of
	// pipelined round r+1; the one that brings it to zero says so.
	roundLeft := make([]atomic.Int64, rounds)
	for r := range roundLeft {
		roundLeft[r].Store(int64(n))
	}
	left.Store(int64(n))
	all, failed, piped, start := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	if rounds == 0 {
		close(piped)
	}
	waiting.Add(n)
	for i := range n {
		exited.Add(1)
		go func() {
			defer exited.Done()
			fail := func(err error) {
				failOnce.Do(func() { failErr = fmt.Errorf("fanout waiter %d: %w", i, err); close(failed) })
			}
			err := wait(ctx, conn, req, i, &waiting)
			if err == nil {
				err = say(int64(i))
			}
			if err != nil {
				fail(err)
				return
			}
			if left.Add(-1) == 0 {
				close(all)
			}
			select {
			case <-start:
			case <-ctx.Done():
				return
			}
			for round := 1; round <= rounds; round++ {
				if err := wait(ctx, conn, req, round*n+i, nil); err != nil {
					fail(err)
					return
				}
				if roundLeft[round-1].Add(-1) == 0 {
					if err := say(int64(round)); err != nil {
						fail(err)
						return
					}
					if round == rounds {
						close(piped)
					}
				}
			}
		}()
	}
	waiting.Wait()
	// Every waiter is on its way into its blocking call: let them get
	// there before the quiet window is measured.
	if err := pause(ctx, req.Idle/4); err != nil {
		return err
	}
	cpu0, wall0 := cpuTime(), hostclock.Now()
	if err := pause(ctx, req.Idle); err != nil {
		return err
	}
	cpu1, wall1 := cpuTime(), hostclock.Now()
	if err := say(int64(cpu1-cpu0), int64(wall1-wall0), int64(osThreads())); err != nil {
		return err
	}
	// until waits for done, a waiter's failure, or the end of ctx.
	until := func(done <-chan struct{}) error {
		select {
		case <-done:
			return nil
		case <-failed:
			return failErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := until(all); err != nil {
		return err
	}
	cpu2, gc2 := cpuTime(), readGC()
	close(start)
	if err := until(piped); err != nil {
		return err
	}
	cpu3, gc3 := cpuTime(), readGC()
	for range ackProbes {
		line, err := reexec.ReadLine()
		if err != nil || line != fanoutProbe {
			return fmt.Errorf("fanout: expected %q, read %q (%v)", fanoutProbe, line, err)
		}
		if err := say(-1); err != nil {
			return err
		}
	}
	return say(int64(cpu2-cpu1), int64(cpuTime()-cpu3)/ackProbes, int64(cpu3-cpu2), int64(gc3.cpu-gc2.cpu), int64(gc3.cycles-gc2.cycles),
		int64(gc3.allocBytes-gc2.allocBytes), int64(gc3.allocs-gc2.allocs))
}

// gcTotals are the garbage collector's CPU as the runtime estimates it
// (all of its classes: assists, workers, pauses), its completed cycles, and
// the heap allocations it has to collect (bytes, objects), so far.
type gcTotals struct {
	cpu                        time.Duration
	cycles, allocBytes, allocs uint64
}

// readGC reads gcTotals from runtime/metrics (zero where the runtime
// does not have them).
func readGC() gcTotals {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	var t gcTotals
	if s[0].Value.Kind() == metrics.KindFloat64 {
		t.cpu = time.Duration(s[0].Value.Float64() * float64(time.Second))
	}
	for i, v := range []*uint64{&t.cycles, &t.allocBytes, &t.allocs} {
		if s[i+1].Value.Kind() == metrics.KindUint64 {
			*v = s[i+1].Value.Uint64()
		}
	}
	return t
}

// wait is a fanout waiter's wait for message i: it blocks until the
// message arrives, calling waiting.Done (when not nil) just before it
// blocks.
func wait(ctx context.Context, conn connector.Receiver, req request, i int, waiting *sync.WaitGroup) error {
	if req.WaitIn == WaitReader {
		rd, err := stream.NewReader(conn, benchFrom, benchTo, fanoutRequest(req.KeyPrefix, req.Run, i),
			stream.ReaderOptions{ProgressTimeout: time.Hour}) // only a delivery, or the run's end, ends it
		if waiting != nil {
			waiting.Done()
		}
		if err != nil {
			return err
		}
		defer rd.Close()
		chunk, err := rd.Next(ctx)
		if err == nil && !stream.Finished(chunk) {
			err = fmt.Errorf("chunk of request %q is not its last", fanoutRequest(req.KeyPrefix, req.Run, i))
		}
		return err
	}
	if waiting != nil {
		waiting.Done()
	}
	v, _, err := conn.Recv(ctx, benchFrom, key(req.KeyPrefix, req.Run, i))
	if err == nil && v == nil {
		err = fmt.Errorf("key %q: no payload", key(req.KeyPrefix, req.Run, i))
	}
	return err
}

// cpuTime is the user and system CPU time of this process, every thread.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pause waits for d or the end of ctx: a measurement window, not a
// synchronisation.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
