//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"omnishm/connector"
)

// DefaultQueueLimit is the number of chunks a Sender queues when
// SenderOptions.QueueLimit is 0.
const DefaultQueueLimit = 64

// SenderOptions configure a Sender. The zero value is usable.
type SenderOptions struct {
	// QueueLimit bounds the chunks enqueued and not yet put (including the
	// one being put); 0 means DefaultQueueLimit.
	QueueLimit int
	// FailWhenFull makes Send and Finish return ErrQueueFull on a full queue
	// instead of blocking until there is room.
	FailWhenFull bool
	// AbortOnClose makes Close drop the chunks not yet put instead of putting
	// them first. Queued releases run either way.
	AbortOnClose bool
	// Recycle, when set, is called on the Sender's goroutine with every
	// payload given to Send or Finish once the Sender is done with it (its
	// chunk was put, or dropped): from then on the payload and its tensors
	// are the caller's again, so a producer can reuse their memory for a
	// later chunk instead of allocating one per chunk. It must not block:
	// the next put waits for it. The Sender then reuses its own chunk maps
	// too (the shallow copy of a payload that carries the finish mark): a
	// transport that Recycle suits keeps nothing of a payload after Put.
	Recycle func(payload map[string]any)
}

// Sender puts the chunk streams of many requests on one edge (from, to).
// Send and Finish enqueue; one background goroutine puts the chunks in the
// order they were enqueued, so the chunks of a request are published in
// index order; over a connector.BatchPutter, small chunks queued together
// go in one pass (one ring lock for them all). It is safe for concurrent
// use.
//
// Ownership: a payload passed to Send or Finish (and every tensor in it)
// belongs to the Sender until its chunk has been put; the connector copies
// it then (SPEC §1), after which the caller may reuse its buffers.
//
// Over a transport that tells claims (connector.ClaimWaiter, as the
// shared-memory connector does), the Sender keeps each chunk's descriptor
// for Drain until Drain has seen it claimed or Release forgets its
// request.
type Sender struct {
	t        connector.Transport
	claims   connector.ClaimWaiter // t, when it tells claims (Drain); else nil
	from, to string
	opts     SenderOptions

	slots chan struct{} // one token per queued chunk: the memory bound
	wake  chan struct{} // nudges the worker (capacity 1)
	stop  chan struct{} // closed by Close: wakes blocked Sends
	done  chan struct{} // closed when the worker has exited

	mu       sync.Mutex
	queue    []op
	next     map[string]int  // next chunk index of each live request
	finished map[string]bool // requests whose last chunk is enqueued
	err      error           // first Put error
	closed   bool
	abort    bool
	sent     map[string]*sentChunks // chunks put and not known claimed, per request (claims only)
	spare    []map[string]any       // emptied chunk maps to reuse (Recycle only)

	puts, dropped, reclaimed atomic.Int64
	closeOnce                sync.Once
}

type op struct {
	request string
	n       int            // the chunk's index in its request
	chunk   map[string]any // nil for a release or a flush
	payload map[string]any // what the caller sent: SenderOptions.Recycle's
	prefix  string         // a release's CleanupPrefix argument
	release chan int
	flushed chan struct{} // a flush: closed once every op before it is done
}

// sentChunks are one request's chunks that were put and not yet seen
// claimed by Drain, in put order. base counts those Drain has dropped from
// the front, so concurrent Drains agree on what is left.
type sentChunks struct {
	chunks   []sentChunk
	base     int
	released bool // Release retired the rest: Drain no longer waits for them
}

type sentChunk struct {
	n int // the chunk's index in its request
	d connector.Descriptor
}

// NewSender starts a Sender of edge from->to over t; bad stages wrap
// connector.ErrBadStage. t stays the caller's: Close does not close it. Close the Sender before the transport, and keep
// the transport open until the receivers have drained (closing a connector
// retires its unclaimed publications, SPEC §9).
func NewSender(t connector.Transport, from, to string, opts SenderOptions) (*Sender, error) {
	if err := checkEdge(from, to); err != nil {
		return nil, err
	}
	if opts.QueueLimit <= 0 {
		opts.QueueLimit = DefaultQueueLimit
	}
	s := &Sender{
		t: t, from: from, to: to, opts: opts,
		slots:    make(chan struct{}, opts.QueueLimit),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		next:     map[string]int{},
		finished: map[string]bool{},
		sent:     map[string]*sentChunks{},
	}
	s.claims, _ = t.(connector.ClaimWaiter)
	go s.run()
	return s, nil
}

// Send enqueues the next chunk of request, with meta.finished false. It
// blocks while the queue is full (until there is room, ctx ends or the
// Sender is closed) unless FailWhenFull is set. It returns the first put
// error of the Sender, if any, instead of enqueueing, and ErrBadRequest for
// a request id that cannot make a chunk key.
func (s *Sender) Send(ctx context.Context, request string, payload map[string]any) error {
	return s.enqueue(ctx, request, payload, false)
}

// Finish enqueues the last chunk of request, with meta.finished true. The
// request's chunks stay available to its reader until Release.
func (s *Sender) Finish(ctx context.Context, request string, payload map[string]any) error {
	return s.enqueue(ctx, request, payload, true)
}

func (s *Sender) enqueue(ctx context.Context, request string, payload map[string]any, last bool) error {
	s.mu.Lock()
	_, live := s.next[request] // its id was checked when its first chunk came
	err := s.checkLocked(request)
	var reuse map[string]any
	if n := len(s.spare); n > 0 && err == nil {
		reuse, s.spare[n-1] = s.spare[n-1], nil
		s.spare = s.spare[:n-1]
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if !live {
		if _, err := checkRequest(request, s.from); err != nil {
			return err
		}
	}
	chunk, err := newChunkInto(reuse, payload, last)
	if err != nil {
		return err
	}
	// Take a slot before the index, so a Send that gives up uses no index.
	if s.opts.FailWhenFull {
		select {
		case s.slots <- struct{}{}:
		default:
			return ErrQueueFull
		}
	} else {
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return ErrClosed
		}
	}
	s.mu.Lock()
	if err := s.checkLocked(request); err != nil {
		s.mu.Unlock()
		<-s.slots
		return err
	}
	n := s.next[request]
	s.next[request] = n + 1
	if last {
		s.finished[request] = true
	}
	s.queue = append(s.queue, op{request: request, n: n, chunk: chunk, payload: payload})
	s.mu.Unlock()
	s.nudge()
	return nil
}

func (s *Sender) checkLocked(request string) error {
	switch {
	case s.closed:
		return ErrClosed
	case s.err != nil:
		return s.err
	case s.finished[request]:
		return fmt.Errorf("%w: %q", ErrFinished, request)
	}
	return nil
}

// Release retires every unclaimed chunk of request, through
// CleanupPrefix({request}_{from}_), once the chunks enqueued before it have
// been put: nothing is retired on the caller's goroutine. The returned
// channel receives the number of chunks reclaimed. Release forgets the
// request: a later Send of the same id starts again at chunk 0 (request ids
// should not be reused, SPEC §6). Call it for every request, finished or
// abandoned, so the Sender's per-request state stays bounded.
func (s *Sender) Release(request string) <-chan int {
	result := make(chan int, 1)
	s.mu.Lock()
	delete(s.next, request)
	delete(s.finished, request)
	if s.closed {
		// Behind whatever the closing worker still puts, then here.
		s.mu.Unlock()
		<-s.done
		s.released(request)
		n := s.t.CleanupPrefix(Prefix(request, s.from))
		s.reclaimed.Add(int64(n))
		result <- n
		return result
	}
	// Releases take no slot: they hold no payload, and there is at most one
	// per request, so they cannot grow the queue without bound.
	s.queue = append(s.queue, op{request: request, prefix: Prefix(request, s.from), release: result})
	s.mu.Unlock()
	s.nudge()
	return result
}

// Reclaimed is the total number of chunks that releases have reclaimed.
func (s *Sender) Reclaimed() int { return int(s.reclaimed.Load()) }

// Puts is the number of chunks put so far.
func (s *Sender) Puts() int { return int(s.puts.Load()) }

// Err returns the first put error, if any. After it, the Sender puts no more
// chunks (a gap would stall the request's reader) and Send returns it.
func (s *Sender) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close stops the Sender: new sends fail with ErrClosed, the queued chunks
// are put (or dropped, with AbortOnClose) and the queued releases run, then
// it returns the first put error. It is idempotent and does not close the
// transport.
func (s *Sender) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.abort = s.opts.AbortOnClose
		s.mu.Unlock()
		close(s.stop)
		s.nudge()
	})
	<-s.done
	return s.Err()
}

func (s *Sender) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run is the worker: it takes ops in order and performs them.
func (s *Sender) run() {
	defer close(s.done)
	batch, _ := s.t.(connector.BatchPutter)
	var (
		run  []op // o and the chunks queued behind it, put together
		pubs []connector.Publication
		last = batchBytes // the size of the last chunk put: the first goes alone
	)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 {
			if s.closed {
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			<-s.wake
			s.mu.Lock()
		}
		o := s.queue[0]
		s.queue[0] = op{}
		s.queue = s.queue[1:]
		skip := s.abort || s.err != nil
		run = append(run[:0], o)
		if batch != nil && o.chunk != nil && !skip {
			// The chunks queued right behind it go in the same pass: one
			// ring lock for them all. As many as, at the size of the last
			// chunk put, make batchBytes: the next chunks are likely its
			// size, and longer runs were slower (see batchBytes).
			limit := min(maxBatch, max(1, batchBytes/max(1, last)))
			for len(s.queue) > 0 && len(run) < limit && s.queue[0].chunk != nil {
				run = append(run, s.queue[0])
				s.queue[0] = op{}
				s.queue = s.queue[1:]
			}
		}
		s.mu.Unlock()

		switch {
		case o.flushed != nil:
			close(o.flushed)
			continue
		case o.release != nil:
			s.released(o.request)
			n := s.t.CleanupPrefix(o.prefix)
			s.reclaimed.Add(int64(n))
			o.release <- n
			continue
		case skip:
			s.dropped.Add(1)
		case len(run) > 1:
			pubs = s.putMany(batch, run, pubs)
			if n := pubs[len(run)-1].Size; n > 0 {
				last = n
			}
			clear(pubs) // the payloads are the caller's again
		default:
			size, d, err := s.t.Put(s.from, s.to, Key(o.request, s.from, o.n), o.chunk)
			s.putDone(o, d, err)
			if size > 0 {
				last = size
			}
		}
		for i := range run {
			s.recycle(run[i])
			run[i] = op{}
		}
	}
}

// maxBatch and batchBytes bound the chunks the worker puts in one pass.
// Measured across two processes (Sender to Reader, 20000 chunks): at
// 8 KiB, runs of 512 B chunks cost 6.2-6.7 µs a chunk against 9.3-10.6
// one by one (chunks of 4 KiB and more still go one by one); at 16 KiB,
// runs of two 7 KiB chunks cost 20-33 µs a chunk against 15-24, their
// receiver asleep more often (8 times the wakeup writes).
const (
	maxBatch   = 16
	batchBytes = 8 << 10
)

// putMany puts run's chunks in one pass (connector.BatchPutter); the
// chunks after one that failed are dropped, as those queued behind it
// are. pubs is scratch memory, returned for the next pass.
func (s *Sender) putMany(batch connector.BatchPutter, run []op, pubs []connector.Publication) []connector.Publication {
	pubs = pubs[:0]
	for _, o := range run {
		pubs = append(pubs, connector.Publication{Key: Key(o.request, s.from, o.n), Payload: o.chunk})
	}
	tried := batch.PutMany(s.from, s.to, pubs)
	for i, o := range run {
		if i >= tried {
			s.dropped.Add(1)
			continue
		}
		s.putDone(o, pubs[i].Descriptor, pubs[i].Err)
	}
	return pubs[:len(run)]
}

// putDone records what the put of o's chunk returned.
func (s *Sender) putDone(o op, d connector.Descriptor, err error) {
	if err != nil {
		s.mu.Lock()
		if s.err == nil {
			// The stream's one layer of context: what the caller sent.
			s.err = fmt.Errorf("stream: request %q chunk %d: %w", o.request, o.n, err)
		}
		s.mu.Unlock()
		return
	}
	s.puts.Add(1)
	s.note(o.request, o.n, d)
}

// recycle hands o's payload back (SenderOptions.Recycle) and frees its
// queue slot, once its chunk was put or dropped.
func (s *Sender) recycle(o op) {
	if s.opts.Recycle != nil {
		s.opts.Recycle(o.payload)
		clear(o.chunk) // keeps its memory; its meta map, one of bareMeta or the chunk's own, is left alone
		s.mu.Lock()
		s.spare = append(s.spare, o.chunk)
		s.mu.Unlock()
	}
	<-s.slots
}

// note remembers a chunk put, for Drain, when the transport tells claims.
func (s *Sender) note(request string, n int, d connector.Descriptor) {
	if s.claims == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.sent[request]
	if sc == nil {
		sc = &sentChunks{}
		s.sent[request] = sc
	}
	sc.chunks = append(sc.chunks, sentChunk{n, d})
}

// released forgets a request's chunks before its release retires them, so
// a Drain waiting on one knows that its retirement was the release's.
func (s *Sender) released(request string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc := s.sent[request]; sc != nil {
		sc.released = true
		delete(s.sent, request)
	}
}

// Drain waits until every chunk enqueued before the call, of every
// request, has been put and then claimed by a receiver, or ctx ends
// (ctx.Err()). It waits for the queued sends first, behind the releases
// queued before it.
//
// A chunk that a Release retired unclaimed is not waited for: the release
// said the request is done with, so Drain returns nil once every other
// chunk is claimed (Reclaimed counts such chunks). A chunk retired
// otherwise (the connector's Cleanup, or Close) is an error wrapping
// connector.ErrRetired that names the request and chunk. When a put
// failed, Drain returns that error (Err): the chunks after it were never
// put. A transport that cannot tell claims (it is not a
// connector.ClaimWaiter) is an error wrapping errors.ErrUnsupported.
// Drain may run beside Send, Release and other Drains; chunks enqueued
// after it began are not its concern.
func (s *Sender) Drain(ctx context.Context) error {
	if s.claims == nil {
		return fmt.Errorf("stream: drain: %w: the transport does not tell claims", errors.ErrUnsupported)
	}
	if err := s.flush(ctx); err != nil {
		return err
	}
	if err := s.Err(); err != nil {
		return err
	}
	type snapshot struct {
		request string
		sc      *sentChunks
		chunks  []sentChunk
		end     int // sc.base + len(chunks): where Drain got to
	}
	s.mu.Lock()
	var todo []snapshot
	for request, sc := range s.sent {
		todo = append(todo, snapshot{request, sc, slices.Clone(sc.chunks), sc.base + len(sc.chunks)})
	}
	s.mu.Unlock()
	for _, sn := range todo {
		for _, c := range sn.chunks {
			err := s.claims.WaitClaimed(ctx, c.d)
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.mu.Lock()
			byRelease := sn.sc.released
			s.mu.Unlock()
			if byRelease && errors.Is(err, connector.ErrRetired) {
				break // the rest of the request is the release's
			}
			return fmt.Errorf("stream: request %q chunk %d: %w", sn.request, c.n, err)
		}
		// Every chunk up to end is claimed (or released): forget them.
		s.mu.Lock()
		if k := sn.end - sn.sc.base; k > 0 {
			sn.sc.chunks = slices.Delete(sn.sc.chunks, 0, k)
			sn.sc.base = sn.end
		}
		if len(sn.sc.chunks) == 0 && s.sent[sn.request] == sn.sc {
			delete(s.sent, sn.request)
		}
		s.mu.Unlock()
	}
	return nil
}

// flush returns once every op enqueued before it has been performed (at
// once after Close, whose worker performs them all before it exits).
func (s *Sender) flush(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		select {
		case <-s.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// A flush takes no slot: it holds no payload, and it is done as soon as
	// the worker reaches it.
	flushed := make(chan struct{})
	s.queue = append(s.queue, op{flushed: flushed})
	s.mu.Unlock()
	s.nudge()
	select {
	case <-flushed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
