package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
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

	sender     *proc.Handle    // the sender's pidfd, when Sender is set and pidfds work
	exited     context.Context // done once the sender has exited; nil when not watched
	markExited context.CancelFunc
	closeOnce  sync.Once
	closed     chan struct{}
}

// NewReader returns a Reader of request's chunks on edge from->to over t.
// When t is a connector.Receiver, Next sleeps in Recv until a producer's
// wakeup (SPEC §8), and t must receive as stage to; otherwise Next polls
// with a bounded backoff. Bad stages wrap connector.ErrBadStage, a bad
// request ErrBadRequest. t stays the caller's. With opts.Sender set the
// Reader holds a pidfd of the sender until the stream ends or Close.
func NewReader(t connector.Transport, from, to, request string, opts ReaderOptions) (*Reader, error) {
	if err := checkEdge(from, to); err != nil {
		return nil, err
	}
	if err := checkRequest(request, from); err != nil {
		return nil, err
	}
	r := &Reader{t: t, from: from, to: to, request: request, opts: opts, closed: make(chan struct{})}
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
	r.watchSender()
	return r, nil
}

// watchSender opens a pidfd of opts.Sender, so a waiting Next learns of
// its exit at once. Without pidfds, senderExited compares start times.
func (r *Reader) watchSender() {
	if r.opts.Sender == (proc.ID{}) {
		return
	}
	h, err := proc.Open(r.opts.Sender)
	if err != nil && !errors.Is(err, proc.ErrNoProcess) {
		return // no pidfds: senderExited asks proc.Check
	}
	r.exited, r.markExited = context.WithCancel(context.Background())
	if err != nil {
		r.markExited() // exited before we looked
		return
	}
	r.sender = h
	go func() {
		select {
		case <-h.Done():
			r.markExited()
		case <-r.closed:
		}
	}()
}

// Close releases the pidfd the Reader holds of its sender; Next does so
// itself once the stream has ended. It does not touch the transport, and
// unread chunks stay published (the sender's Release retires them).
// Close is idempotent.
func (r *Reader) Close() error {
	var err error
	r.closeOnce.Do(func() {
		close(r.closed)
		if r.sender != nil {
			err = r.sender.Close()
		}
	})
	return err
}

// Received is the number of chunks Next has returned.
func (r *Reader) Received() int { return r.next }

// Next returns the request's next chunk, which the caller owns. After the
// chunk marked finished it returns io.EOF. It returns ctx.Err() when ctx
// ends, ErrSenderGone when the sender exited or made no progress within
// the timeout, and ErrBadChunk for a chunk that is not a map.
func (r *Reader) Next(ctx context.Context) (map[string]any, error) {
	if r.done {
		return nil, io.EOF
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
		why := r.senderGone()
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
		r.Close()
		return nil, fmt.Errorf("%w: request %q chunk %d: %s", ErrSenderGone, r.request, r.next, why)
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
		if r.exited != nil {
			defer context.AfterFunc(r.exited, cancel)()
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
	if r.exited != nil {
		exited = r.exited.Done()
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
// sender exited or the progress deadline passed.
func (r *Reader) senderGone() string {
	if r.senderExited() {
		return fmt.Sprintf("sender process %v is dead", r.opts.Sender)
	}
	if !time.Now().Before(r.deadline) {
		return fmt.Sprintf("no chunk within %v", r.opts.ProgressTimeout)
	}
	return ""
}

func (r *Reader) senderExited() bool {
	switch {
	case r.exited != nil:
		return r.exited.Err() != nil
	case r.opts.Sender != (proc.ID{}):
		return proc.Check(r.opts.Sender) == proc.Dead
	}
	return false
}
