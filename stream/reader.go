package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"omnishm/connector"
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
	// gives up with ErrSenderGone; 0 means DefaultProgressTimeout.
	ProgressTimeout time.Duration
	// SenderAlive, when set, is asked every CheckInterval while Next waits;
	// once it reports false, Next makes one last attempt and then returns
	// ErrSenderGone. Implement it with the producer's identity (a pidfd, or
	// kill(pid, 0) plus the start time), not its pid alone.
	SenderAlive func() bool
	// CheckInterval is how often a waiting Next checks SenderAlive and the
	// progress timeout; 0 means DefaultCheckInterval.
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
}

// NewReader returns a Reader of request's chunks on edge from->to over t.
// When t is a connector.Receiver, Next sleeps in Recv until a producer's
// wakeup (SPEC §8); t's stage must then be to. Otherwise Next polls with a
// bounded backoff.
func NewReader(t connector.Transport, from, to, request string, opts ReaderOptions) (*Reader, error) {
	for _, c := range [][2]string{{"from stage", from}, {"to stage", to}, {"request", request}} {
		if err := checkName(c[0], c[1]); err != nil {
			return nil, err
		}
	}
	if opts.ProgressTimeout <= 0 {
		opts.ProgressTimeout = DefaultProgressTimeout
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	r := &Reader{t: t, from: from, to: to, request: request, opts: opts}
	r.recv, _ = t.(connector.Receiver)
	return r, nil
}

// Received is the number of chunks Next has returned.
func (r *Reader) Received() int { return r.next }

// Next returns the request's next chunk, which the caller owns. After the
// chunk marked finished it returns io.EOF. It returns ctx.Err() when ctx
// ends, ErrSenderGone when the producer made no progress within the
// timeout or is dead, and ErrBadChunk for a chunk that is not a map.
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
		return nil, fmt.Errorf("%w: request %q chunk %d: %s", ErrSenderGone, r.request, r.next, why)
	}
}

func (r *Reader) accept(key string, payload any) (map[string]any, error) {
	chunk, ok := asMap(payload)
	if !ok {
		return nil, fmt.Errorf("%w: %s is %T", ErrBadChunk, key, payload)
	}
	r.next++
	r.deadline = time.Now().Add(r.opts.ProgressTimeout)
	r.done = Finished(chunk)
	return chunk, nil
}

// wait tries to claim key for up to about one CheckInterval.
func (r *Reader) wait(ctx context.Context, key string, backoff *time.Duration) (any, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if r.recv != nil {
		sub, cancel := context.WithTimeout(ctx, min(r.opts.CheckInterval, time.Until(r.deadline)))
		defer cancel()
		payload, _, err := r.recv.Recv(sub, r.from, key)
		switch {
		case err == nil:
			return payload, true, nil
		case ctx.Err() != nil:
			return nil, false, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("stream: receive %s: %w", key, err)
	}
	payload, ok, err := r.get(key)
	if err != nil || ok {
		return payload, ok, err
	}
	timer := time.NewTimer(min(*backoff, time.Until(r.deadline)))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case <-timer.C:
	}
	*backoff = min(*backoff*2, r.opts.MaxBackoff)
	return nil, false, nil
}

func (r *Reader) get(key string) (any, bool, error) {
	payload, _, ok, err := r.t.Get(r.from, r.to, key, nil)
	if err != nil {
		return nil, false, fmt.Errorf("stream: get %s: %w", key, err)
	}
	return payload, ok, nil
}

// senderGone says why the wait should end ("" while it should go on): the
// progress deadline passed or the liveness check failed.
func (r *Reader) senderGone() string {
	if !time.Now().Before(r.deadline) {
		return fmt.Sprintf("no chunk within %v", r.opts.ProgressTimeout)
	}
	if r.opts.SenderAlive != nil && !r.opts.SenderAlive() {
		return "the sender is dead"
	}
	return ""
}
