//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"omnishm/connector"
)

// DefaultMuxBuffer is MuxOptions.Buffer when it is 0.
const DefaultMuxBuffer = 8

var (
	// ErrMuxClosed is returned by Mux.Next and Mux.Add after Close.
	ErrMuxClosed = errors.New("stream: mux closed")
	// ErrDuplicate is returned by Mux.Add for a request it receives already.
	ErrDuplicate = errors.New("stream: request already added")
)

// MuxOptions configure a Mux. The zero value is usable.
type MuxOptions struct {
	// Buffer bounds, per request, the chunks received and not yet returned
	// by Next; 0 means DefaultMuxBuffer. A request whose chunks are not
	// consumed stops being received once it has Buffer of them waiting:
	// its later chunks stay published (in the producer's ring, or as
	// per-key segments once the ring is full) until Next makes room.
	// A request's chunks that are there already are claimed in one pass
	// (ReaderOptions.Prefetch), as many as the buffer has room for.
	Buffer int
	// Reader configures each request's Reader (its progress timeout,
	// sender). A request's ring producer is followed without it.
	Reader ReaderOptions
}

// Chunk is one chunk of one request, as Mux.Next returns it.
type Chunk struct {
	Request string
	N       int            // its index in the request: 0, 1, 2, ...
	Payload map[string]any // the caller's: nothing in it aliases shared memory
	Last    bool           // marked finished: the request is done
}

// Mux receives the chunk streams of many requests on one edge for a stage
// that consumes them all, and yields each chunk as it arrives: in index
// order within a request, in arrival order across requests.
//
// The Mux is told which requests to receive (Add): a stage learns its
// request ids from whoever schedules them, and a Mux that claimed every
// chunk key it could find on the edge would take requests meant for
// another replica of the stage, which shares the edge.
//
// Receiving a chunk costs the same however many requests are open: each
// request waits in the connector's dispatcher (connector.SHM.Recv), which
// wakes only the waiter a put is for; the Mux holds no OS thread, timer
// or poll per request (one goroutine per open request, parked until its
// chunk arrives). Its memory is bounded by MuxOptions.Buffer chunks per
// request. Safe for concurrent use.
type Mux struct {
	t        connector.Receiver
	from, to string
	opts     MuxOptions
	ctx      context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup

	mu       sync.Mutex
	requests map[string]*muxRequest
	queue    []muxItem // received, in arrival order
	head     int       // queue[head:] are waiting for Next
	closed   bool
	ready    chan struct{} // capacity 1: the queue has items
}

type muxRequest struct {
	id     string
	room   chan struct{} // one token per chunk the request may still buffer
	cancel context.CancelFunc
}

type muxItem struct {
	rq    *muxRequest
	chunk Chunk
	err   error
}

// NewMux returns a Mux of edge from->to over t, which must receive as
// stage to (connector.ErrBadStage otherwise, as for bad stage ids). t
// stays the caller's.
func NewMux(t connector.Receiver, from, to string, opts MuxOptions) (*Mux, error) {
	if err := checkEdge(from, to); err != nil {
		return nil, err
	}
	if t.Stage() != connector.Stage(to) {
		return nil, fmt.Errorf("stream: mux of edge %s->%s: %w: the transport receives as stage %q", from, to, connector.ErrBadStage, t.Stage())
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultMuxBuffer
	}
	m := &Mux{t: t, from: from, to: to, opts: opts, requests: map[string]*muxRequest{}, ready: make(chan struct{}, 1)}
	m.ctx, m.stop = context.WithCancel(context.Background())
	return m, nil
}

// Add starts receiving request's chunks from chunk 0. It returns
// ErrBadRequest for an id that cannot make a chunk key, ErrDuplicate for
// a request being received, ErrMuxClosed after Close. A request is
// forgotten once Next returned its last chunk or its error, or Remove.
func (m *Mux) Add(request string) error {
	r, err := NewReader(m.t, m.from, m.to, request, m.opts.Reader)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		r.Close()
		return ErrMuxClosed
	case m.requests[request] != nil:
		r.Close()
		return fmt.Errorf("%w: %q", ErrDuplicate, request)
	}
	rq := &muxRequest{id: request, room: make(chan struct{}, m.opts.Buffer)}
	for range m.opts.Buffer {
		rq.room <- struct{}{}
	}
	// The reader claims ahead only what the buffer has room for: the
	// token receive took for this Next, and those still free.
	r.room = func() int { return 1 + len(rq.room) }
	var ctx context.Context
	ctx, rq.cancel = context.WithCancel(m.ctx)
	m.requests[request] = rq
	m.wg.Go(func() { m.receive(ctx, rq, r) })
	return nil
}

// Remove stops receiving request and drops its chunks not yet returned
// (they were claimed: they are gone from shared memory too). Unreceived
// chunks stay published; the sender's Release retires them.
func (m *Mux) Remove(request string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rq := m.requests[request]
	if rq == nil {
		return
	}
	rq.cancel()
	delete(m.requests, request)
	kept := m.queue[:m.head]
	for _, it := range m.queue[m.head:] {
		if it.rq != rq {
			kept = append(kept, it)
		}
	}
	clear(m.queue[len(kept):])
	m.queue = kept
}

// receive runs one request's reader: it takes a token of room before each
// chunk, so at most Buffer of them wait for Next.
func (m *Mux) receive(ctx context.Context, rq *muxRequest, r *Reader) {
	defer r.Close()
	for {
		select {
		case <-rq.room:
		case <-ctx.Done():
			return
		}
		n := r.Received()
		payload, err := r.Next(ctx)
		if ctx.Err() != nil {
			return // removed, or the Mux closed
		}
		it := muxItem{rq: rq, err: err}
		if err == nil {
			it.chunk = Chunk{Request: rq.id, N: n, Payload: payload, Last: Finished(payload)}
		}
		m.mu.Lock()
		if m.requests[rq.id] != rq { // removed meanwhile
			m.mu.Unlock()
			return
		}
		m.queue = append(m.queue, it)
		m.mu.Unlock()
		m.signal()
		if err != nil || it.chunk.Last {
			return
		}
	}
}

func (m *Mux) signal() {
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// Next returns the next chunk that arrived for any request, which the
// caller owns. A request's failure (ErrSenderGone, ErrBadChunk, a
// transport error, each naming the request) is returned once, with the
// Chunk's Request set, and ends that request; the others go on. Next
// returns ctx.Err() when ctx ends first and ErrMuxClosed after Close. With
// no request added it waits for one to be added and its chunk to arrive.
func (m *Mux) Next(ctx context.Context) (Chunk, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return Chunk{}, ErrMuxClosed
		}
		if m.head < len(m.queue) {
			it := m.queue[m.head]
			m.queue[m.head] = muxItem{}
			m.head++
			if m.head == len(m.queue) {
				m.queue, m.head = m.queue[:0], 0
			} else {
				m.signal() // more for another caller
			}
			if it.err != nil || it.chunk.Last {
				delete(m.requests, it.rq.id)
			}
			m.mu.Unlock()
			if it.err != nil {
				return Chunk{Request: it.rq.id}, it.err
			}
			it.rq.room <- struct{}{} // never blocks: this chunk held the token
			return it.chunk, nil
		}
		m.mu.Unlock()
		select {
		case <-m.ready:
		case <-ctx.Done():
			return Chunk{}, ctx.Err()
		}
	}
}

// Buffered is the number of chunks of request received and not yet
// returned by Next: at most MuxOptions.Buffer.
func (m *Mux) Buffered(request string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, it := range m.queue[m.head:] {
		if it.rq.id == request && it.err == nil {
			n++
		}
	}
	return n
}

// Close stops receiving every request and waits for their readers to end;
// chunks received and not returned are dropped (they were claimed), and
// unreceived ones stay published. Next and Add then return ErrMuxClosed.
// Close does not close the transport. It is idempotent.
func (m *Mux) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.stop()
	m.wg.Wait()
	m.mu.Lock()
	clear(m.requests)
	clear(m.queue)
	m.queue, m.head = nil, 0
	m.mu.Unlock()
	return nil
}
