package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"omnishm/connector"
	"omnishm/proc"
)

// Defaults of ReaderOptions' zero fields.
const (
	DefaultProgressTimeout = 30 * time.Second
	DefaultCheckInterval   = 50 * time.Millisecond
	DefaultMaxBackoff      = 5 * time.Millisecond
	minBackoff             = 20 * time.Microsecond
)

// ReaderOptions configure a Reader. The zero value is usable.
type ReaderOptions struct {
	// ProgressTimeout is how long Next waits for the next chunk before it
	// gives up with ErrSenderGone; 0 means DefaultProgressTimeout. It is
	// the last resort when the sender's process is not known.
	ProgressTimeout time.Duration
	// Sender, when not zero, is the producing process (proc.Self in the
	// producer, passed to the receiver out of band). Once it has exited,
	// Next returns the chunks already published and then ErrSenderGone,
	// without waiting out ProgressTimeout. A liveness that cannot be known
	// (an unreadable /proc) never ends the stream.
	Sender proc.ID
	// CheckInterval is how often a waiting Next checks the progress timeout
	// (and the sender, where the kernel offers no pidfd to wait on); 0
	// means DefaultCheckInterval.
	CheckInterval time.Duration
	// MaxBackoff caps the poll interval used when the transport cannot block
	// (it is not a connector.Receiver); 0 means DefaultMaxBackoff.
	MaxBackoff time.Duration
}

// Reader yields the chunks of one request on edge from->to, in order. Use
// one Reader per request: readers of different requests on the same edge
// share the transport and never take each other's chunks, since every
// chunk key names its request. A Reader is not safe for concurrent use.
type Reader struct {
	t        connector.Transport
	recv     connector.Receiver // t, when it can block on wakeups
	from, to string
	request  string
	opts     ReaderOptions
	next     int
	done     bool
	deadline time.Time // of the progress timeout; zero before the first Next
	gone     error     // the ErrSenderGone of the sender's exit, returned again

	sender *exitWatch // nil without ReaderOptions.Sender, or once closed
}

// NewReader returns a Reader of request's chunks on edge from->to over t.
// When t is a connector.Receiver, Next sleeps in Recv until a producer's
// wakeup (SPEC §8), and t must receive as stage to; otherwise Next polls
// with a bounded backoff. Bad stages wrap connector.ErrBadStage, a bad
// request ErrBadRequest. t stays the caller's. With opts.Sender set the
// Reader watches the sender (through a pidfd that all readers of that
// process share) until the stream ends or Close.
func NewReader(t connector.Transport, from, to, request string, opts ReaderOptions) (*Reader, error) {
	if err := checkEdge(from, to); err != nil {
		return nil, err
	}
	if err := checkRequest(request, from); err != nil {
		return nil, err
	}
	r := &Reader{t: t, from: from, to: to, request: request, opts: opts}
	if recv, ok := t.(connector.Receiver); ok {
		if recv.Stage() != connector.Stage(to) {
			return nil, fmt.Errorf("stream: reader of edge %s->%s: %w: the transport receives as stage %q", from, to, connector.ErrBadStage, recv.Stage())
		}
		r.recv = recv
	}
	if r.opts.ProgressTimeout <= 0 {
		r.opts.ProgressTimeout = DefaultProgressTimeout
	}
	if r.opts.CheckInterval <= 0 {
		r.opts.CheckInterval = DefaultCheckInterval
	}
	if r.opts.MaxBackoff <= 0 {
		r.opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.Sender != (proc.ID{}) {
		r.sender = watchExit(opts.Sender)
	}
	return r, nil
}

// Close stops watching the sender (Next does so itself once the stream has
// ended); a later Next then only has the progress timeout. Close does not
// touch the transport, and unread chunks stay published (the sender's
// Release retires them). It is idempotent.
func (r *Reader) Close() error {
	if r.sender != nil {
		r.sender.release()
		r.sender = nil
	}
	return nil
}

// Received is the number of chunks Next has returned.
func (r *Reader) Received() int { return r.next }

// Next returns the request's next chunk, which the caller owns. After the
// chunk marked finished it returns io.EOF. It returns ctx.Err() when ctx
// ends, ErrSenderGone when the sender exited or made no progress within
// the timeout (after an exit, from then on), and ErrBadChunk for a chunk
// that is not a map.
func (r *Reader) Next(ctx context.Context) (map[string]any, error) {
	if r.done {
		return nil, io.EOF
	}
	if r.gone != nil {
		return nil, r.gone
	}
	if r.deadline.IsZero() {
		r.deadline = time.Now().Add(r.opts.ProgressTimeout)
	}
	key := Key(r.request, r.from, r.next)
	backoff := minBackoff
	for {
		payload, ok, err := r.wait(ctx, key, &backoff)
		if err != nil {
			return nil, err
		}
		if ok {
			return r.accept(key, payload)
		}
		why, exited := r.senderGone()
		if why == "" {
			continue
		}
		// One last attempt: a chunk put just before the producer died may
		// still be claimable (its per-key segment outlives it).
		if payload, ok, err = r.get(key); err != nil {
			return nil, err
		}
		if ok {
			return r.accept(key, payload)
		}
		err = fmt.Errorf("%w: request %q chunk %d: %s", ErrSenderGone, r.request, r.next, why)
		if exited {
			// Final: its chunks are published in order, so none can follow.
			r.Close()
			r.gone = err
		}
		return nil, err
	}
}

func (r *Reader) accept(key string, payload any) (map[string]any, error) {
	chunk, ok := asMap(payload)
	if !ok {
		return nil, fmt.Errorf("%w: request %q chunk %d is %T", ErrBadChunk, r.request, r.next, payload)
	}
	r.next++
	r.deadline = time.Now().Add(r.opts.ProgressTimeout)
	r.done = Finished(chunk)
	if r.done {
		r.Close()
	}
	return chunk, nil
}

// wait tries to claim key for up to about one CheckInterval, less if the
// sender exits meanwhile.
func (r *Reader) wait(ctx context.Context, key string, backoff *time.Duration) (any, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if r.recv != nil {
		sub, cancel := context.WithTimeout(ctx, min(r.opts.CheckInterval, time.Until(r.deadline)))
		defer cancel()
		if exited := r.exited(); exited != nil {
			defer context.AfterFunc(exited, cancel)()
		}
		payload, _, err := r.recv.Recv(sub, r.from, key)
		switch {
		case err == nil:
			return payload, true, nil
		case ctx.Err() != nil:
			return nil, false, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			return nil, false, nil
		}
		return nil, false, r.wrap(err)
	}
	payload, ok, err := r.get(key)
	if err != nil || ok {
		return payload, ok, err
	}
	var exited <-chan struct{} // nil, so never ready, when not watched
	if ctx := r.exited(); ctx != nil {
		exited = ctx.Done()
	}
	timer := time.NewTimer(min(*backoff, time.Until(r.deadline)))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case <-exited:
	case <-timer.C:
	}
	*backoff = min(*backoff*2, r.opts.MaxBackoff)
	return nil, false, nil
}

func (r *Reader) get(key string) (any, bool, error) {
	payload, _, ok, err := r.t.Get(r.from, r.to, key, nil)
	if err != nil {
		return nil, false, r.wrap(err)
	}
	return payload, ok, nil
}

// wrap is the stream's one layer of error context: the request and chunk.
func (r *Reader) wrap(err error) error {
	return fmt.Errorf("stream: request %q chunk %d: %w", r.request, r.next, err)
}

// senderGone says why the wait should end ("" while it should go on): the
// sender exited, or the progress deadline passed.
func (r *Reader) senderGone() (why string, exited bool) {
	if r.senderExited() {
		return fmt.Sprintf("sender process %v is dead", r.opts.Sender), true
	}
	if !time.Now().Before(r.deadline) {
		return fmt.Sprintf("no chunk within %v", r.opts.ProgressTimeout), false
	}
	return "", false
}

// exited is done once the sender has exited, nil while that cannot be
// waited for (no sender, no pidfds, or the Reader closed).
func (r *Reader) exited() context.Context {
	if r.sender == nil {
		return nil
	}
	return r.sender.exited
}

func (r *Reader) senderExited() bool { return r.sender != nil && r.sender.gone() }
