//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"omnishm/connector"
	"omnishm/internal/hostclock"
)

// A stream cell: this process sends warm-up and timed messages with at
// most a window in flight, the receiver process receives them in order
// and acknowledges every ack-th one, the warm-up's last and the last, each
// with its arrival time. The window waits on those acknowledgements; the
// warm-up is drained before timing starts, so the timed run starts from
// an empty pipeline and ends at the last arrival. Then the receiver checks
// that nothing of the cell is left to receive and says so on one more line.

// timeStream is a stream cell.
func timeStream(r *runner, c *cell) error {
	window := r.plan.window(c.payload.Size)
	total := c.warmup + c.count
	req := r.request(Stream, c)
	req.Messages, req.Size, req.Warmup, req.Ack = total, len(c.form), c.warmup, max(1, window/4)
	err := r.peer.request(req)
	if err != nil {
		return err
	}
	send := r.sender(c)
	var (
		before      connector.Health
		start, last time.Duration // the timed run's start, the latest acknowledged arrival
		acked       int
		perMsg      []time.Duration // time per message over each timed acknowledgement
	)
	awaitAck := func() error {
		v, err := r.peer.numbers(r.ctx, 2)
		if err != nil {
			return err
		}
		n, t := int(v[0]), time.Duration(v[1])
		if n <= acked || n > total {
			return fmt.Errorf("receiver acknowledged %d messages after %d, of %d", n, acked, total)
		}
		if n > c.warmup {
			perMsg = append(perMsg, (t-last)/time.Duration(n-acked))
		}
		acked, last = n, t
		return nil
	}
	for i := range total {
		if i == c.warmup {
			for acked < c.warmup {
				if err := awaitAck(); err != nil {
					return err
				}
			}
			before = c.health()
			start = hostclock.Now()
			last = start
		}
		for i-acked >= window {
			if err := awaitAck(); err != nil {
				return err
			}
		}
		if err := r.ctx.Err(); err != nil {
			return err
		}
		if err := send(key(r.plan.KeyPrefix, c.run, i), i); err != nil {
			return err
		}
		r.step(c)
	}
	for acked < total {
		if err := awaitAck(); err != nil {
			return err
		}
	}
	elapsed := last - start
	res := Summarize(c.transport, c.payload.Size, perMsg)
	res.Transport, res.Fallbacks = c.carried(before)
	res.Count, res.Window = c.count, window
	if elapsed > 0 {
		res.MeanUs = float64(elapsed) / float64(time.Microsecond) / float64(c.count)
		res.MsgsPerS = float64(c.count) / elapsed.Seconds()
		res.BytesPerS = res.MsgsPerS * float64(c.payload.Size)
	}
	check, err := r.peer.numbers(r.ctx, 2)
	if err != nil {
		return err
	}
	if got, left := int(check[0]), int(check[1]); got != total || left != 0 {
		return fmt.Errorf("stream %s %s: %d of %d messages received once, %d left to receive again",
			res.Transport, FormatSize(c.payload.Size), got, total, left)
	}
	r.add(c, res)
	return nil
}

// errStalled ends a stream whose next message did not come within
// recvTimeout.
var errStalled = errors.New("no message within the receive timeout")

// serveStream is the receiver's side of a stream cell.
func serveStream(ctx context.Context, in incoming) error {
	req := in.req
	// One timer for the whole stream, moved on at every acknowledgement:
	// no timer per message in the receive loop being timed.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(recvTimeout, func() { cancel(errStalled) })
	defer stall.Stop()
	for i := range req.Messages {
		if err := in.next(ctx, i); err != nil {
			if cause := context.Cause(ctx); cause != nil {
				err = cause
			}
			return fmt.Errorf("stream message %d of %d: %w", i, req.Messages, err)
		}
		if n := i + 1; n%req.Ack == 0 || n == req.Warmup || n == req.Messages {
			stall.Reset(recvTimeout)
			if err := say(int64(n), int64(hostclock.Now())); err != nil {
				return err
			}
		}
	}
	// Each key was received once, in order. Received exactly once: none
	// can be received again (a second copy, a ring frame not retired).
	left := 0
	if in.conn != nil {
		for i := range req.Messages {
			_, _, ok, err := in.conn.Get(benchFrom, benchTo, key(req.KeyPrefix, req.Run, i), nil)
			if err != nil {
				return err
			}
			if ok {
				left++
			}
		}
	} else if more, err := udsPending(in.sock); err != nil {
		return err
	} else if more {
		left = 1
	}
	return say(int64(req.Messages), int64(left))
}
