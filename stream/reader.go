//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"time"

	"omnishm/connector"
	"omnishm/frame"
	"omnishm/proc"
)

// Defaults of ReaderOptions' zero fields.
const (
	DefaultProgressTimeout = 30 * time.Second
	DefaultCheckInterval   = 50 * time.Millisecond
	DefaultMaxBackoff      = 5 * time.Millisecond
	DefaultPrefetch        = 16
	minBackoff             = 20 * time.Microsecond
)

// ReaderOptions configure a Reader. The zero value is usable.
type ReaderOptions struct {
	// ProgressTimeout is how long Next waits for the next chunk before it
	// gives up with ErrSenderGone; 0 means DefaultProgressTimeout. It is
	// the last resort when the sender's process is not known. Readers
	// waiting under one ctx share its timer, so a wait may end up to a
	// sixteenth of it late.
	ProgressTimeout time.Duration
	// Sender, when not zero, is the producing process (proc.Self in the
	// producer, passed to the receiver out of band). Once it has exited,
	// Next returns the chunks already published and then ErrSenderGone,
	// without waiting out ProgressTimeout. A liveness that cannot be known
	// (an unreadable /proc) never ends the stream. Without it, a Reader
	// over a connector.MessageReceiver follows the producer of the ring it
	// received the last chunk from (connector.Message.Producer) the same
	// way, so only a stream carried by per-key segments alone depends on
	// ProgressTimeout.
	Sender proc.ID
	// CheckInterval is how often a waiting Next checks a producer's
	// liveness where the kernel offers no pidfd to wait on; 0 means
	// DefaultCheckInterval. With pidfds nothing is polled: the exit ends
	// the wait.
	CheckInterval time.Duration
	// MaxBackoff caps the poll interval used when the transport cannot block
	// (it is not a connector.Receiver); 0 means DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Prefetch bounds the chunks Next claims in one pass when the
	// transport can (connector.BatchReceiver): the chunks from the next
	// one on that are there already, up to Prefetch of them, each ring
	// locked once for all of them. Next returns them one by one before it
	// waits again. 0 means DefaultPrefetch; a negative value claims one
	// chunk at a time. Chunks claimed ahead are the Reader's: Close drops
	// the ones Next has not returned.
	Prefetch int
}

// Reader yields the chunks of one request on edge from->to, in order. Use
// one Reader per request: readers of different requests on the same edge
// share the transport and never take each other's chunks, since every
// chunk key names its request. A Reader is not safe for concurrent use.
type Reader struct {
	t        connector.Transport
	recv     connector.Receiver        // t, when it can block on wakeups
	msgs     connector.MessageReceiver // t, when it says who published a chunk
	alloc    frame.Allocator           // NextInto's, during the call
	from, to string
	request  string
	opts     ReaderOptions
	next     int
	done     bool
	deadline time.Time // of the progress timeout; zero before the first Next
	gone     error     // the ErrSenderGone of the sender's exit, returned again
	ahead    []taken   // chunks claimed ahead: ahead[aheadAt:] are next, next+1, ..., not yet returned
	aheadAt  int
	keys     []string // the keys of chunks keysAt, keysAt+1, ... (TakeReady's, and the wait's)
	keysAt   int
	key0     [1]string                              // keys' first backing: a one-chunk request's reader allocates no slice
	collect  func(string, connector.Message, error) // TakeReady's deliver, made once
	room     func() int                             // bounds a run further when set (a Mux's free buffer)

	sender   *exitWatch // nil without ReaderOptions.Sender, or once closed
	producer *exitWatch // the ring producer of the last chunk; nil without one, or once closed
	waiting  waitScope  // the context waits in Recv run under, kept across Next calls
}

// waitScope is a context for waits in Recv: the caller's ctx, ended at the
// progress deadline and when a watched producer exits. A Reader keeps it
// for the Next calls that follow with the same ctx and watches: a context,
// timer and exit hook made and dropped per chunk were a third of the
// stream's own cost per chunk. Readers waiting under the same ctx and
// watches share one (sharedWait), so a stage with many requests open, or
// one of many short requests, holds one context and timer for them all,
// not one per request.
type waitScope struct {
	parent  context.Context
	ctx     context.Context // nil when none is kept
	watched [2]*exitWatch   // what it was made for: sender, producer
	shared  *sharedWait
}

// drop ends the reader's part in the scope.
func (w *waitScope) drop() {
	if w.ctx == nil {
		return
	}
	w.shared.release()
	*w = waitScope{}
}

// sharedWait is the context of waits in Recv under one ctx and watches
// whose progress deadlines fall in one slot (waitSlot), which ends at the
// slot's end: Next's progress timeout fires up to a slot late.
type sharedWait struct {
	key    waitKey // zero for one not in sharedWaits (an incomparable ctx)
	ctx    context.Context
	cancel context.CancelFunc
	stops  []func() bool // the exit hooks
	refs   int           // under sharedMu
}

type waitKey struct {
	parent  context.Context
	end     int64 // the slot's end, Unix nanoseconds
	watched [2]*exitWatch
}

// waitSlots is how many slots a progress timeout spans: the timeout ends
// a wait up to a sixteenth of itself late.
const waitSlots = 16

var (
	sharedMu    sync.Mutex
	sharedWaits = map[waitKey]*sharedWait{}
)

// shareWait returns the wait context under parent, a comparable context,
// and watched that ends at deadline or up to timeout / waitSlots later;
// release it once done.
func shareWait(parent context.Context, watched [2]*exitWatch, deadline time.Time, timeout time.Duration) *sharedWait {
	slot := max(int64(timeout/waitSlots), 1)
	end := (deadline.UnixNano() + slot - 1) / slot * slot
	k := waitKey{parent: parent, end: end, watched: watched}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	w := sharedWaits[k]
	if w == nil || w.ctx.Err() != nil {
		// A shared one that ended stays its holders' until they release it.
		w = newSharedWait(k, parent, watched, end)
		sharedWaits[k] = w
	}
	w.refs++
	return w
}

// newSharedWait makes the wait context of k, under parent; one of its own
// when k is zero.
func newSharedWait(k waitKey, parent context.Context, watched [2]*exitWatch, end int64) *sharedWait {
	w := &sharedWait{key: k}
	w.ctx, w.cancel = context.WithDeadline(parent, time.Unix(0, end))
	for _, x := range watched {
		if x != nil && x.exited != nil {
			w.stops = append(w.stops, context.AfterFunc(x.exited, w.cancel))
		}
	}
	return w
}

// release ends w once no reader holds it.
func (w *sharedWait) release() {
	if w.key.parent != nil {
		sharedMu.Lock()
		w.refs--
		last := w.refs == 0
		if last && sharedWaits[w.key] == w {
			delete(sharedWaits, w.key)
		}
		sharedMu.Unlock()
		if !last {
			return
		}
	}
	for _, stop := range w.stops {
		stop()
	}
	w.cancel()
}

// NewReader returns a Reader of request's chunks on edge from->to over t.
// When t is a connector.Receiver, Next waits in Recv (on the connector's
// dispatcher: no thread, timer or poll of its own per Reader; the
// progress deadline's timer is shared with the readers waiting under the
// same ctx), and t must receive as stage to; otherwise
// Next polls with a bounded backoff. Bad stages wrap
// connector.ErrBadStage, a bad request ErrBadRequest. t stays the
// caller's. With opts.Sender set, or once a chunk came through a ring of a
// known producer, the Reader watches that process (through a pidfd that all
// readers of that process share) until the stream ends or Close.
func NewReader(t connector.Transport, from, to, request string, opts ReaderOptions) (*Reader, error) {
	if err := checkEdge(from, to); err != nil {
		return nil, err
	}
	first, err := checkRequest(request, from)
	if err != nil {
		return nil, err
	}
	// One allocation for the Reader, its first key's slice inside it (a
	// fanout of one-chunk requests makes a reader per chunk). What t can
	// do beyond Recv it is asked when needed (receiver's helpers), not kept.
	r := &Reader{t: t, from: from, to: to, request: request, opts: opts}
	r.key0[0] = first
	r.keys = r.key0[:]
	if recv, ok := t.(connector.Receiver); ok {
		if recv.Stage() != connector.Stage(to) {
			return nil, fmt.Errorf("stream: reader of edge %s->%s: %w: the transport receives as stage %q", from, to, connector.ErrBadStage, recv.Stage())
		}
		r.recv = recv
		r.msgs, _ = t.(connector.MessageReceiver)
	}
	if r.opts.Prefetch == 0 { // a negative one stays: no runs claimed (batch)
		r.opts.Prefetch = DefaultPrefetch
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

// taken is a chunk claimed ahead, or the error that consumed it.
type taken struct {
	m   connector.Message
	err error
}

// Close stops watching the sender (Next does so itself once the stream has
// ended); a later Next then only has the progress timeout. Close does not
// touch the transport, and unread chunks stay published (the sender's
// Release retires them), but for those claimed ahead (ReaderOptions.Prefetch),
// which are dropped. It is idempotent.
func (r *Reader) Close() error {
	clear(r.ahead)
	r.ahead, r.aheadAt = nil, 0
	r.waiting.drop()
	for _, w := range []**exitWatch{&r.sender, &r.producer} {
		if *w != nil {
			(*w).release()
			*w = nil
		}
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
	if r.aheadAt == len(r.ahead) {
		r.takeAhead()
	}
	if r.aheadAt < len(r.ahead) {
		t := r.ahead[r.aheadAt]
		r.ahead[r.aheadAt] = taken{}
		r.aheadAt++
		if t.err != nil {
			return nil, r.wrap(t.err)
		}
		return r.accept(t.m)
	}
	key := r.key()
	backoff := minBackoff
	for {
		var m connector.Message
		var ok bool
		var err error
		if r.recv == nil {
			m, ok, err = r.poll(ctx, key, &backoff)
		} else if err = ctx.Err(); err == nil {
			// Recv is called from this frame, not a helper's: a reader
			// parked in it is a stack every collection scans frame by
			// frame (about 0.4 µs a frame), and a stage parks one per
			// open request.
			sub, stops := r.waitContext(ctx)
			switch {
			case r.alloc != nil: // only NextInto sets it, and only with into
				m, err = r.into().RecvInto(sub, r.from, key, r.alloc)
			case r.msgs != nil:
				m, err = r.msgs.RecvMessage(sub, r.from, key)
			default:
				m.Payload, m.Size, err = r.recv.Recv(sub, r.from, key)
			}
			for _, stop := range stops {
				if stop != nil {
					stop()
				}
			}
			ok, err = r.received(ctx, err)
		}
		if err != nil {
			return nil, err
		}
		if ok {
			return r.accept(m)
		}
		why, exited := r.senderGone()
		if why == "" {
			continue
		}
		// One last attempt: a chunk put just before the producer died may
		// still be claimable (its per-key segment outlives it).
		if m, ok, err = r.get(key); err != nil {
			return nil, err
		}
		if ok {
			return r.accept(m)
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

// NextInto is Next decoding the chunk into memory the caller supplies
// (connector.IntoReceiver's RecvInto): the chunk's tensors, and its
// serialized bytes when it came per key, are a's, so a stage that reads a
// stream of same-shaped chunks recycles one buffer (a frame.Arena reset
// before each call) instead of allocating one per chunk. Ownership is
// RecvInto's: a is the caller's before and after; the chunk returned may
// refer to it, and nothing keeps a reference to it. A chunk a has no room
// for is not consumed: the error wraps frame.ErrAllocate, and a later
// NextInto with more room, or Next, returns it. NextInto claims one chunk
// at a time (no Prefetch), and returns first the chunks an earlier Next
// claimed ahead, in memory of their own. On a transport that cannot
// decode into supplied memory it is Next.
func (r *Reader) NextInto(ctx context.Context, a frame.Allocator) (map[string]any, error) {
	if a == nil {
		return nil, fmt.Errorf("stream: request %q chunk %d: nil allocator", r.request, r.next)
	}
	if r.into() == nil {
		return r.Next(ctx)
	}
	r.alloc = a
	defer func() { r.alloc = nil }()
	return r.Next(ctx)
}

// takeAhead claims, in one pass, the chunks from the next one on that are
// there already (connector.BatchReceiver), up to Prefetch of them; from
// the second on: the first is the wait's, whose Recv takes it if it is
// there (a run starts only at a chunk the receiver's scan has seen, and
// Recv scans), so a reader of a one-chunk request, or one whose sender has
// not started, makes no pass of its own and builds no keys of chunks that
// may never come (16 of them were most of such a reader's garbage).
func (r *Reader) takeAhead() {
	if r.alloc != nil || r.next == 0 {
		return
	}
	batch := r.batch()
	if batch == nil {
		return
	}
	n := r.opts.Prefetch
	if r.room != nil {
		n = min(n, r.room())
	}
	if n <= 0 {
		return
	}
	r.keysFrom(n)
	clear(r.ahead[:r.aheadAt])
	r.ahead, r.aheadAt = r.ahead[:0], 0
	if r.collect == nil {
		r.collect = func(_ string, m connector.Message, err error) { r.ahead = append(r.ahead, taken{m, err}) }
	}
	// Its error (a ring found corrupt, a lock that failed) is not the
	// stream's: Next's own wait meets it again, or the chunk on another
	// path.
	batch.TakeReady(r.from, r.keys[:n], r.collect)
}

// into is t when it can block on wakeups and decode into supplied memory
// (NextInto); else nil.
func (r *Reader) into() connector.IntoReceiver {
	if r.recv == nil {
		return nil
	}
	into, _ := r.t.(connector.IntoReceiver)
	return into
}

// batch is t when it can block on wakeups and claim runs of chunks
// (takeAhead), and Prefetch allows runs; else nil.
func (r *Reader) batch() connector.BatchReceiver {
	if r.recv == nil || r.opts.Prefetch < 0 {
		return nil
	}
	batch, _ := r.t.(connector.BatchReceiver)
	return batch
}

// keysFrom makes r.keys the keys of chunks next, next+1, ..., at least n
// of them: those built already and still ahead are kept, so a Next that
// finds nothing and waits builds none again.
func (r *Reader) keysFrom(n int) {
	if skip := r.next - r.keysAt; skip > 0 && skip < len(r.keys) {
		r.keys = r.keys[:copy(r.keys, r.keys[skip:])]
	} else if skip != 0 {
		r.keys = r.keys[:0]
	}
	r.keysAt = r.next
	for i := len(r.keys); i < n; i++ {
		r.keys = append(r.keys, Key(r.request, r.from, r.next+i))
	}
}

// key is the key of the next chunk.
func (r *Reader) key() string {
	r.keysFrom(1)
	return r.keys[0]
}

func (r *Reader) accept(m connector.Message) (map[string]any, error) {
	chunk, ok := asMap(m.Payload)
	if !ok {
		return nil, fmt.Errorf("%w: request %q chunk %d is %T", ErrBadChunk, r.request, r.next, m.Payload)
	}
	r.next++
	if r.done = Finished(chunk); r.done {
		// Nothing is waited for after the last chunk: its producer needs
		// no watch (a one-chunk request's reader takes none), the
		// progress deadline no clock.
		r.Close()
		return chunk, nil
	}
	r.follow(m.Producer)
	r.deadline = time.Now().Add(r.opts.ProgressTimeout)
	return chunk, nil
}

// follow watches the producer of the chunk just received, when the path
// named one (a ring's creator) other than the sender already watched and
// this process.
func (r *Reader) follow(id proc.ID) {
	switch {
	case id == (proc.ID{}), r.producer != nil && r.producer.id == id,
		r.sender != nil && r.sender.id == id, proc.IsSelf(id):
		return
	}
	if r.producer != nil {
		r.producer.release()
	}
	r.producer = watchExit(id)
}

// watched are the processes whose exit ends the stream: the sender and
// the producer, each nil when not watched (an array: no allocation per
// wait).
func (r *Reader) watched() [2]*exitWatch { return [2]*exitWatch{r.sender, r.producer} }

// received sorts out what Recv returned in Next's wait: a chunk (ok), the
// end of the wait context only (neither: look at the deadline and the
// watches, and wait again), or an error.
func (r *Reader) received(ctx context.Context, err error) (ok bool, _ error) {
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false, nil
	}
	return false, r.wrap(err)
}

// poll tries to claim key once on a transport that cannot block, then
// sleeps for the backoff, less if a watched producer exits meanwhile or
// the progress deadline comes.
func (r *Reader) poll(ctx context.Context, key string, backoff *time.Duration) (connector.Message, bool, error) {
	if err := ctx.Err(); err != nil {
		return connector.Message{}, false, err
	}
	m, ok, err := r.get(key)
	if err != nil || ok {
		return m, ok, err
	}
	// nil channels, never ready, for what is not watched
	var exited [2]<-chan struct{}
	for i, w := range r.watched() {
		if w != nil && w.exited != nil {
			exited[i] = w.exited.Done()
		}
	}
	timer := time.NewTimer(min(*backoff, time.Until(r.deadline)))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return connector.Message{}, false, ctx.Err()
	case <-exited[0]:
	case <-exited[1]:
	case <-timer.C:
	}
	*backoff = min(*backoff*2, r.opts.MaxBackoff)
	return connector.Message{}, false, nil
}

// waitContext returns the context of a wait in Recv: it ends at the
// progress deadline, when a watched producer exits, or (a watch without a
// pidfd) after a CheckInterval, to look at its start time; stops are to be
// called once the wait is over.
func (r *Reader) waitContext(ctx context.Context) (sub context.Context, stops [2]context.CancelFunc) {
	sub = r.scope(ctx)
	for i, w := range r.watched() {
		if w != nil && w.exited == nil {
			// No pidfd to wait on: look at its start time now and then.
			sub, stops[i] = context.WithTimeout(sub, r.opts.CheckInterval)
		}
	}
	return sub, stops
}

// scope returns the context waits in Recv share (waitScope): the one
// kept, while its ctx and watches are this wait's and it has not ended,
// else a new one. A kept one may end before the current deadline, as it
// was set from an older one: Next then finds the deadline ahead
// (senderGone) and waits again, in a new one.
func (r *Reader) scope(ctx context.Context) context.Context {
	w := &r.waiting
	watched := r.watched()
	if w.ctx != nil && w.parent != nil && w.parent == ctx && w.watched == watched && w.ctx.Err() == nil {
		return w.ctx
	}
	w.drop()
	w.watched = watched
	if comparableContext(ctx) { // else keep none
		w.parent = ctx
	}
	if w.parent != nil {
		w.shared = shareWait(ctx, watched, r.deadline, r.opts.ProgressTimeout)
	} else {
		w.shared = newSharedWait(waitKey{}, ctx, watched, r.deadline.UnixNano())
	}
	w.ctx = w.shared.ctx
	return w.ctx
}

// comparableContext reports whether ctx == x cannot panic, for any x: the
// value decides, not its type, as a struct context of a comparable type
// may hold a func in an interface field. The kinds that cannot hold one,
// the usual ones (a pointer; Background's empty struct), are told by their
// type: reflect.Value.Comparable walks a struct's fields, 8 allocations
// for context.Background, and a reader of a one-chunk request asks once.
func comparableContext(ctx context.Context) bool {
	t := reflect.TypeOf(ctx)
	switch {
	case t == nil: // a nil ctx, which Next refuses before this
		return false
	case t.Kind() == reflect.Pointer, t.Kind() == reflect.Chan, t.Kind() == reflect.UnsafePointer:
		return true
	case t.Size() == 0: // no room for an interface field
		return t.Comparable()
	}
	return reflect.ValueOf(ctx).Comparable()
}

func (r *Reader) get(key string) (connector.Message, bool, error) {
	var m connector.Message
	var ok bool
	var err error
	switch {
	case r.alloc != nil:
		m, ok, err = r.into().GetInto(r.from, r.to, key, nil, r.alloc)
	case r.msgs != nil:
		m, ok, err = r.msgs.GetMessage(r.from, r.to, key, nil)
	default:
		m.Payload, m.Size, ok, err = r.t.Get(r.from, r.to, key, nil)
	}
	if err != nil {
		return connector.Message{}, false, r.wrap(err)
	}
	return m, ok, nil
}

// wrap is the stream's one layer of error context: the request and chunk.
func (r *Reader) wrap(err error) error {
	return fmt.Errorf("stream: request %q chunk %d: %w", r.request, r.next, err)
}

// senderGone says why the wait should end ("" while it should go on): a
// watched producer exited, or the progress deadline passed. The reason
// says what the reader saw (seen): it is built only when the stream gives
// up, from what accept records anyway.
func (r *Reader) senderGone() (why string, exited bool) {
	if r.sender != nil && r.sender.gone() {
		return fmt.Sprintf("sender process %v is dead; %s", r.opts.Sender, r.lastChunk()), true
	}
	if r.producer != nil && r.producer.gone() {
		return fmt.Sprintf("producer process %v of the ring chunk %d came through is dead; %s", r.producer.id, r.next-1, r.lastChunk()), true
	}
	if !time.Now().Before(r.deadline) {
		return fmt.Sprintf("no chunk within %v; %s, %s", r.opts.ProgressTimeout, r.lastChunk(), r.producerKnown()), false
	}
	return "", false
}

// lastChunk says which chunk came last and how long ago, for an
// ErrSenderGone.
func (r *Reader) lastChunk() string {
	if r.next == 0 {
		return "no chunk received yet"
	}
	// accept set the deadline from the last chunk's arrival.
	ago := time.Since(r.deadline.Add(-r.opts.ProgressTimeout)).Round(time.Millisecond)
	return fmt.Sprintf("the last chunk received, %d, came %v ago", r.next-1, ago)
}

// producerKnown says whose exit the reader was watching for, for a
// progress timeout: without one only the timeout could end the wait.
func (r *Reader) producerKnown() string {
	switch {
	case r.sender != nil:
		return fmt.Sprintf("sender process %v alive", r.sender.id)
	case r.producer != nil:
		return fmt.Sprintf("producer process %v of the ring chunk %d came through alive", r.producer.id, r.next-1)
	case r.msgs == nil:
		return "its producer unknown (no ReaderOptions.Sender, and the transport does not say who published a chunk)"
	}
	return "its producer unknown (no ReaderOptions.Sender, and no chunk came through a ring)"
}
