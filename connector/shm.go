//go:build linux

package connector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"omnishm/descriptor"
	"omnishm/frame"
	"omnishm/keys"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/segment"
	"omnishm/wake"
	"omnishm/wire"
)

// SHM is the shared-memory connector: vLLM-Omni's SharedMemoryConnector in
// Go. Small payloads of numeric edges go through a host ring per producer
// and edge; large ones, those arriving while the ring is full, and all of
// them when the ring is disabled, through per-key segments. It is safe for
// concurrent use by many goroutines.
type SHM struct {
	opts   Options
	log    *slog.Logger
	names  scope.Names
	parent int // the parent pid names was made with

	ring     *ring.Transport
	segments *segment.Producer
	claimer  segment.Claimer
	notifier *wake.Notifier // nil when wakeups are off
	waiter   *wake.Receiver // nil without a numeric stage or wakeups
	claims   ledger         // the fates of its publications (claim.go)
	shmWatch shmWatch       // wakes WaitClaimed on per-key publications

	dispatchOnce sync.Once                  // starts the receive dispatcher (dispatch.go)
	dispatcher   atomic.Pointer[dispatcher] // nil until the first Recv waits
	closeOnce    sync.Once
	closed       atomic.Bool

	ringFallbacks                atomic.Uint64 // puts and gets are counted in stats alone
	watchdogWarned, unsafeWarned atomic.Bool
	inotifyWarned                atomic.Bool // watchFailed said so
	ringDirTracked               atomic.Bool
	fifos                        []string // tracked with the watchdog (crash.go)
	stats                        stats    // per-edge figures (stats.go)
}

// Open returns a shared-memory connector configured by opts (the zero
// Options are the defaults). It refuses a malformed StageID (ErrBadStage)
// or HostRingBytes. Rings are created lazily on the first put of an edge;
// a receiver with a stage and wakeups on creates its FIFO now. The caller
// owns the connector and must Close it.
func Open(opts Options) (*SHM, error) {
	opts, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	// The parent pid now, for a timeout's message: the names are keyed by
	// it without a scope, and a parent that exits later changes Getppid.
	parent := os.Getppid()
	c := &SHM{opts: opts, log: opts.Logger, parent: parent, names: scope.ForUID(os.Getuid(), opts.WakeupScope, parent)}
	c.ring, err = ring.New(ring.Options{
		Names:    c.names,
		Capacity: opts.HostRingBytes,
		OnSetupFailure: func(from, to string, err error) {
			c.log.Warn("host ring unavailable; using per-key SHM", "from", from, "to", to, "err", err)
			c.stats.ringSetupFailed(from, to) // stats
		},
		OnCorrupt: func(name string, err error) {
			c.log.Warn("host ring rejected as corrupt; not attached again until it changes", "ring", name, "err", err)
		},
		OnWatchFailure: func(err error) { c.watchFailed("ring discovery", err) },
		OnCreate:       c.trackRing, // stats: the watchdog's c.track, and Stats().Rings
		OnRemove:       c.forgetRing,
		OnRetire:       c.claims.ringRetired, // claim.go: the claims ledger
	})
	if err != nil {
		return nil, fmt.Errorf("connector: open: %w", err)
	}
	c.segments = segment.NewProducer(segment.Options{WillCreate: c.trackSegment, OnCreate: c.track, OnRemove: c.forget})
	c.claimer = segment.Claimer{Dir: scope.ShmDir, WillRemove: c.trackSegment, OnRemove: c.forget}
	if !opts.DisableWakeups && wake.Enabled() {
		c.notifier = wake.NewNotifier(c.names.WakeDir)
		c.noteNotifierWatch()
		if opts.StageID != NoStage {
			c.trackDir(c.names.WakeDir)
			if c.waiter, err = wake.OpenReceiver(c.names.WakeDir, string(opts.StageID)); err != nil {
				// Wakeups are hints (SPEC §8): Recv falls back to polling.
				c.log.Warn("omnishm: wakeup FIFO unavailable; receives will poll", "stage", opts.StageID, "err", err)
				c.waiter = nil
			} else {
				// Only the receive dispatcher's leader sleeps on the FIFO,
				// and it announces each sleep: from the start, Go producers
				// then write no wakeup while none is announced. A connector
				// that receives with Get alone, and so never starts the
				// dispatcher, cost each ring put to its stage a FIFO write
				// nobody read (BenchmarkPutGetPair/ring: 7.8 µs a pair, 4.3
				// with it skipped, as without a stage).
				c.waiter.CountSleeps()
				c.fifos = c.trackFIFOs()
			}
		}
	}
	return c, nil
}

// watchFailed says, once per connector, that a part of it (what) goes
// without inotify, and why: it polls instead, and keeps working. Ring
// discovery then stats the ring directory on every miss, a put that may
// have to wake a stage stats the wake directory, and the receive
// dispatcher tries every waited key at each safety re-poll without
// backing off. The usual cause is the per-user limit on inotify instances
// (fs.inotify.max_user_instances, 128 by default on many systems; each
// process of the user holds some) or watches (max_user_watches).
func (c *SHM) watchFailed(what string, err error) {
	if !c.inotifyWarned.Swap(true) {
		c.log.Warn("omnishm: inotify unavailable; polling instead (see fs.inotify.max_user_instances)", "for", what, "err", err)
	}
}

// noteNotifierWatch reports the wake directory going without inotify,
// which the Notifier finds when it is made or at a put.
func (c *SHM) noteNotifierWatch() {
	if c.notifier == nil || c.inotifyWarned.Load() {
		return
	}
	if err := c.notifier.WatchErr(); err != nil {
		c.watchFailed("wakeups", err)
	}
}

// Put implements Transport. The payload is copied (into the ring or a
// segment) before Put returns. The error wraps ErrBadKey for a key that
// cannot name a publication (nothing was touched) and ErrClosed once the
// connector is closed or shutting down.
func (c *SHM) Put(from, to, key string, payload any) (int, Descriptor, error) {
	t, err := c.beginPut(key)
	if err != nil {
		return 0, Descriptor{}, err
	}
	size, d, err := c.put(from, to, key, payload, t.replacing)
	c.endPut(key, t, d, err)
	return size, d, err
}

// put is Put's work; Put notes it in the claims ledger. perKey says the
// ledger holds a per-key publication of key: without one the segment
// producer holds none unclaimed (the ledger drops a record only once its
// segment is consumed or retired).
func (c *SHM) put(from, to, key string, payload any, perKey bool) (int, Descriptor, error) {
	start := c.stats.start() // stats: 0 unless MeasureLatency
	if c.closed.Load() {
		return 0, Descriptor{}, ErrClosed
	}
	if err := keys.Check(key); err != nil {
		return 0, Descriptor{}, keyError("put", key, err)
	}
	if err := edgeError("put", key, from, to); err != nil {
		return 0, Descriptor{}, err
	}
	var plain *plainForm // the kind-0 form, once made
	if c.ring.Capacity() > 0 && numeric(from) && numeric(to) {
		c.trackRingDir()
		d, ok, pf, err := c.putRing(from, to, key, payload)
		if err != nil {
			return 0, Descriptor{}, keyError("put", key, err)
		}
		if ok {
			// A previous version of the key may sit in a segment (SPEC §9).
			if perKey && c.segments.Pending(key) {
				c.cleanupSegment(key)
			}
			c.published(to, true)
			c.stats.put(from, to, PathRing, d.Size, start) // stats
			return d.Size, Descriptor{HostRing: &d, Size: d.Size}, nil
		}
		plain = pf
	}
	if plain == nil {
		var err error
		if plain, err = marshalPlain(payload); err != nil {
			return 0, Descriptor{}, keyError("put", key, err)
		}
	}
	defer plain.release()
	c.ringFallbacks.Add(1)
	c.fellBack(from, to, key, plain.size()) // stats
	// The kind-0 bytes go from the payload's tensors straight into the
	// segment: one copy.
	d, err := c.segments.PutParts(key, plain.parts())
	if err != nil {
		return 0, Descriptor{}, keyError("put", key, err)
	}
	// A successful fallback replaces an unclaimed ring version, too.
	c.cancelRing(key, false, byReput)
	c.published(to, false)
	c.stats.put(from, to, PathSegment, d.Size, start) // stats
	return d.Size, Descriptor{Shm: &d, Size: d.Size}, nil
}

// putRing offers the payload to the edge's ring as the seed does (SPEC §9):
// a tensor frame when it has tensors and the frame fits, else its kind-0
// bytes. ok=false is a refusal; plain then holds the kind-0 form if it was
// made, for the per-key path to reuse (and release).
func (c *SHM) putRing(from, to, key string, payload any) (d descriptor.RingHandle, ok bool, plain *plainForm, err error) {
	limit := c.ring.MaxPayload(key)
	p, err := frame.Prepare(payload, limit)
	switch {
	case err == nil:
		defer p.Release()
		// A tensor frame, or without tensors the kind-0 bytes, written
		// straight into ring memory (the ring refuses a frame over its limit
		// before taking a lock). A write that fails (only a payload mutated
		// during Put) publishes nothing: the earlier version stays.
		kind := ring.KindBytes
		if p.Tensors() {
			kind = ring.KindTensors
		}
		if d, ok, err = c.ring.Put(from, to, key, kind, p.Size(), p.Write); ok || err != nil || p.Tensors() {
			return d, ok, nil, err
		}
		// Refused: the per-key path needs the kind-0 bytes, these.
		plain = getPlain()
		plain.whole = make([]byte, p.Size())
		if err := p.Write(plain.whole); err != nil {
			plain.release()
			return d, false, nil, err
		}
		return d, false, plain, nil
	case errors.Is(err, frame.ErrTooLarge):
		// The plain form may still fit (no frame header, no alignment), and
		// the per-key path needs it anyway.
		if plain, err = marshalPlain(payload); err != nil {
			return d, false, nil, err
		}
		d, ok, err = c.ring.Put(from, to, key, ring.KindBytes, plain.size(), plain.pieces.Write)
		if ok || err != nil {
			plain.release()
			return d, ok, nil, err
		}
		return d, false, plain, nil
	}
	return d, false, nil, err
}

// plainForm is a payload's kind-0 form on its way to a segment: in pieces
// that leave the large leaf data in the payload's own memory, or whole.
type plainForm struct {
	pieces wire.Pieces
	whole  []byte // instead of pieces, when set
	list   [][]byte
}

// plainCut is the smallest leaf data left in the payload's memory: below
// it, copying it into the skeleton costs less than a part of its own.
const plainCut = 4 << 10

var plainForms = sync.Pool{New: func() any { return new(plainForm) }}

func getPlain() *plainForm { return plainForms.Get().(*plainForm) }

// marshalPlain makes the kind-0 form of payload, in pieces.
func marshalPlain(payload any) (*plainForm, error) {
	f := getPlain()
	if err := wire.MarshalPieces(&f.pieces, payload, plainCut); err != nil {
		f.release()
		return nil, err
	}
	return f, nil
}

func (f *plainForm) size() int {
	if f.whole != nil {
		return len(f.whole)
	}
	return f.pieces.Size()
}

// parts are the form's bytes in order; valid until release.
func (f *plainForm) parts() [][]byte {
	if f.whole != nil {
		f.list = append(f.list[:0], f.whole)
	} else {
		f.list = f.pieces.Parts(f.list[:0])
	}
	return f.list
}

// release drops the form's references to the payload and pools it.
func (f *plainForm) release() {
	f.pieces.Reset()
	clear(f.list)
	f.whole, f.list = nil, f.list[:0]
	plainForms.Put(f)
}

// keyError is the connector's one layer of error context: the operation
// and the key. The packages below name the operation and the file; callers
// above add what they alone know (a stream its request and chunk).
//
// An operation that failed because Close ran meanwhile is ErrClosed, as one
// after Close is (it published nothing). A descriptor naming no ring of this
// user wraps ErrBadDescriptor; a bad key's error names the key already.
func keyError(op, key string, err error) error {
	switch {
	case errors.Is(err, ring.ErrClosed), errors.Is(err, segment.ErrClosed):
		return ErrClosed
	case errors.Is(err, ErrBadKey):
		return fmt.Errorf("connector: %s: %w", op, err)
	case errors.Is(err, ring.ErrName) && !errors.Is(err, ErrBadDescriptor):
		err = fmt.Errorf("%w: %w", ErrBadDescriptor, err)
	}
	return fmt.Errorf("connector: %s %q: %w", op, keys.Shorten(key), err)
}

func (c *SHM) published(to string, ring bool) {
	if c.notifier != nil && numeric(to) {
		if ring {
			// A Go receiver's dispatcher finds ring frames by itself
			// before it sleeps: only a sleeping one needs the byte.
			c.notifier.NotifyRing(to)
		} else {
			c.notifier.Notify(to)
		}
	}
}

// decodeRing turns a ring payload into owned values while the ring lock is
// held: nothing returned aliases ring memory.
func decodeRing(kind ring.Kind, payload []byte) (any, error) { return decodeWith(nil, kind, payload) }

// Get implements Transport. Without a descriptor it tries the edge's rings,
// then discovery, then the per-key segment; with a ring descriptor it reads
// only that publication (SPEC §9). The payload is the caller's: it was
// decoded into memory of its own. The error wraps ErrBadKey, ErrBadDescriptor
// (a descriptor naming no publication of this protocol) or ErrClosed where
// those apply.
func (c *SHM) Get(from, to, key string, desc *Descriptor) (any, int, bool, error) {
	m, ok, err := c.GetMessage(from, to, key, desc)
	return m.Payload, m.Size, ok, err
}

// GetMessage is Get that also says which process published the payload,
// where the path knows it (Message.Producer).
func (c *SHM) GetMessage(from, to, key string, desc *Descriptor) (Message, bool, error) {
	return c.getMessage(from, to, key, desc, nil)
}

// getMessage is GetMessage, decoding into a's memory unless a is nil
// (GetInto, into.go).
func (c *SHM) getMessage(from, to, key string, desc *Descriptor, a frame.Allocator) (Message, bool, error) {
	if c.closed.Load() {
		return Message{}, false, ErrClosed
	}
	if err := keys.Check(key); err != nil {
		return Message{}, false, keyError("get", key, err)
	}
	if err := edgeError("get", key, from, to); err != nil {
		return Message{}, false, err
	}
	var rd *descriptor.RingHandle
	if desc != nil {
		if err := desc.Validate(); err != nil {
			return Message{}, false, keyError("get", key, err)
		}
		rd = desc.HostRing
	}
	if m, ok, err := c.getRingWith(from, to, key, rd, decodeInto(a)); ok || err != nil || rd != nil {
		return m, ok, err
	}
	m, ok, err := c.getSegmentInto(from, to, key, a)
	if err != nil {
		return Message{}, false, keyError("get", key, err)
	}
	return m, ok, nil
}

// getSegmentInto is the per-key part of Get (SPEC §6), counted in Health,
// reading into a's memory unless a is nil. A file at the key's name that
// is not this user's segment is a miss (logged once).
func (c *SHM) getSegmentInto(from, to, key string, a frame.Allocator) (Message, bool, error) {
	var data []byte
	var ok, handed bool
	var err error
	if a == nil {
		data, ok, err = c.claimer.Claim(key)
	} else {
		data, ok, err = c.claimer.ClaimInto(key, func(n int) ([]byte, error) {
			b, err := frame.Allocate(a, n)
			handed = err == nil
			return b, err
		})
	}
	if err != nil && c.missUnsafe(key, err) {
		return Message{}, false, nil
	}
	if err != nil && handed {
		// A read that failed once the segment was being read into the
		// supplied memory may have written part of it.
		err = fmt.Errorf("%w: %w", frame.ErrWritten, err)
	}
	if err != nil || !ok {
		return Message{}, false, err
	}
	// data was read into memory of our own (or the caller's): large
	// tensors may keep it.
	var v any
	if a == nil {
		v, err = wire.UnmarshalOwned(data)
	} else {
		v, err = frame.UnmarshalSupplied(data)
	}
	if err != nil {
		return Message{}, false, err
	}
	c.stats.got(from, to, PathSegment, len(data)) // stats
	return Message{Payload: v, Size: len(data)}, true, nil
}

// GetWithDeadline implements Transport: once deadline has passed it misses
// without touching shared memory. Get itself never waits on another
// process's lock, so it cannot overrun the deadline by more than one copy.
func (c *SHM) GetWithDeadline(from, to, key string, desc *Descriptor, deadline time.Time) (any, int, bool, error) {
	if !time.Now().Before(deadline) {
		return nil, 0, false, nil
	}
	return c.Get(from, to, key, desc)
}

// GetContext implements Transport: once ctx is done it misses without
// touching shared memory; like Get it never waits on another process's lock.
func (c *SHM) GetContext(ctx context.Context, from, to, key string, desc *Descriptor) (any, int, bool, error) {
	if ctx.Err() != nil {
		return nil, 0, false, nil
	}
	return c.Get(from, to, key, desc)
}

// Stage implements Receiver: Options.StageID.
func (c *SHM) Stage() Stage { return c.opts.StageID }

// Recv implements Receiver: it blocks until key arrives on edge
// from->Stage() (a *RecvTimeoutError once ctx's deadline passes, see
// RecvMessage). What has arrived already is taken at once; otherwise the
// connector's one receive dispatcher (started by the first Recv that
// waits) serves the call when a producer's wakeup, a ring event or a
// lock-file hint says the key may have arrived, and polls on its behalf
// (Options.PollInterval), so a lost wakeup only costs latency. A waiting
// Recv holds no OS thread and makes no system call of its own.
func (c *SHM) Recv(ctx context.Context, from, key string) (any, int, error) {
	m, err := c.RecvMessage(ctx, from, key)
	return m.Payload, m.Size, err
}

// RecvMessage is Recv that also says which process published the payload,
// where the path knows it (Message.Producer). A payload claimed for a
// RecvMessage whose ctx ended meanwhile is returned, not dropped. When ctx's
// deadline passes first the error is a *RecvTimeoutError, which names the
// scope and what the receiver saw on the edge, and wraps
// context.DeadlineExceeded.
func (c *SHM) RecvMessage(ctx context.Context, from, key string) (Message, error) {
	return c.recv(ctx, from, key, nil)
}

// recv is RecvMessage, decoding into a's memory unless a is nil (RecvInto,
// into.go).
func (c *SHM) recv(ctx context.Context, from, key string, a frame.Allocator) (msg Message, err error) {
	if c.opts.StageID == NoStage {
		return Message{}, fmt.Errorf("connector: recv %q: %w: this connector has no Options.StageID", keys.Shorten(key), ErrBadStage)
	}
	if err := edgeError("recv", key, from, string(c.opts.StageID)); err != nil {
		return Message{}, err
	}
	if c.closed.Load() {
		return Message{}, ErrClosed
	}
	defer c.stats.endRecv(c.stats.beginRecv(from, string(c.opts.StageID)), &err) // stats: waiters, wait time
	if err := keys.Check(key); err != nil {
		return Message{}, keyError("recv", key, err)
	}
	// The rings first, here: a miss costs no system call when no ring
	// moved. The per-key path is the dispatcher's first try for the key.
	// While the dispatcher's leader serves, it serves a new waiter before
	// it sleeps, claiming its frame with the others of that serve under one
	// ring lock and liveness check: a claim of this Recv's own would take
	// the ring lock once more, and meet the sweep's hold of the ring. A
	// Recv whose ctx ended waits for no serve: it tries.
	decode := decodeInto(a)
	if d := c.dispatcher.Load(); d == nil || !d.serving.Load() || ctx.Err() != nil {
		if m, ok, err := c.getRingWith(from, string(c.opts.StageID), key, nil, decode); ok || err != nil {
			return m, err
		}
	}
	if m, ok, err := c.spin(from, key, decode); ok || err != nil {
		return m, err
	}
	if ctx.Err() != nil {
		return Message{}, c.recvErr(ctx, from, key)
	}
	d := c.dispatch()
	if d == nil {
		return Message{}, ErrClosed
	}
	w, lead, err := d.wait(from, key, a)
	if err != nil {
		return Message{}, err
	}
	if lead {
		// No goroutine serves the waiters: this one does, until its own
		// result is there (see dispatcher.lead); ctx's end interrupts it.
		if ctx.Done() != nil { // a ctx that never ends needs no watch
			stop := context.AfterFunc(ctx, d.nudge)
			defer stop()
		}
		d.lead(w, ctx)
	}
	select {
	case r := <-w.ch:
		w.release()
		return r.msg, r.err
	case <-ctx.Done():
		r, claimed := d.cancel(w)
		w.release()
		if claimed {
			return r.msg, r.err
		}
		return Message{}, c.recvErr(ctx, from, key)
	}
}

// Waiting is the number of Recv calls waiting for a publication now, for a
// stage's metrics.
func (c *SHM) Waiting() int {
	if d := c.dispatcher.Load(); d != nil {
		return int(d.count.Load())
	}
	return 0
}

// spin polls the edge's rings, without a system call per miss, for up to
// Options.Spin before Recv hands the wait to the dispatcher, when no other
// Recv waits: one message in flight is read without a sleep and a wakeup,
// and many waiters never spin.
func (c *SHM) spin(from, key string, decode func(ring.Kind, []byte) (any, error)) (Message, bool, error) {
	if c.opts.Spin <= 0 || c.ring.Capacity() == 0 || !numeric(from) || c.Waiting() > 0 {
		return Message{}, false, nil
	}
	to := string(c.opts.StageID)
	start := time.Now()
	end, contended := start.Add(c.opts.Spin), c.ring.Contended()
	// The producers' liveness is checked between tries, not in the try
	// that finds the frame: that try's claim is then one system call
	// shorter, and the check is still this Recv's, at most vouchEvery old.
	var vouch ring.Vouch
	var vouched time.Time
	for now := start; now.Before(end); now = time.Now() {
		if now.Sub(vouched) >= vouchEvery {
			c.ring.Vouch(from, to, &vouch)
			vouched = now
		}
		if m, ok, err := c.getRingVouched(from, to, key, decode, &vouch); ok || err != nil {
			return m, ok, err
		}
		if n := c.ring.Contended(); n != contended {
			// A ring's lock was held: its producer is writing a frame
			// (a large one takes long), and a sleep now would cost far
			// more than the wait. Spin on while that goes on, within a
			// bound.
			contended = n
			if end = now.Add(c.opts.Spin); end.After(start.Add(busySpins * c.opts.Spin)) {
				end = start.Add(busySpins * c.opts.Spin)
			}
		}
		runtime.Gosched()
	}
	return Message{}, false, nil
}

// busySpins bounds a spin that meets a held ring lock at this many Spins:
// about a 16 MiB frame's copy with the default Spin.
const busySpins = 20

// vouchEvery is how often a spin checks the edge's producers (one poll of
// each pidfd): a claim in the spin relies on a check at most this old.
const vouchEvery = 20 * time.Microsecond

// getRingWith is the ring part of Get, counted in Health, decoding with
// decode (decodeRing, or into supplied memory).
func (c *SHM) getRingWith(from, to, key string, rd *descriptor.RingHandle, decode func(ring.Kind, []byte) (any, error)) (Message, bool, error) {
	got, ok, err := c.ring.Receive(from, to, key, rd, decode)
	return c.gotRing(from, to, key, got, ok, err)
}

// getRingVouched is getRingWith without a descriptor, skipping the
// liveness checks v made (ring.Vouch).
func (c *SHM) getRingVouched(from, to, key string, decode func(ring.Kind, []byte) (any, error), v *ring.Vouch) (Message, bool, error) {
	got, ok, err := c.ring.ReceiveVouched(from, to, key, decode, v)
	return c.gotRing(from, to, key, got, ok, err)
}

// gotRing is what a ring receive's result makes of a Get's.
func (c *SHM) gotRing(from, to, key string, got ring.Taken, ok bool, err error) (Message, bool, error) {
	if err != nil {
		return Message{}, false, keyError("get", key, err)
	}
	if !ok {
		return Message{}, false, nil
	}
	c.stats.got(from, to, PathRing, got.Size) // stats
	return Message{Payload: got.Value, Size: got.Size, Producer: got.Producer}, true, nil
}

// Cleanup implements Transport: it retires key on both paths.
func (c *SHM) Cleanup(key string) bool {
	if keys.Check(key) != nil {
		return false
	}
	frames, seg := c.retire(key) // claim.go: noted in the claims ledger
	return frames > 0 || seg
}

// CleanupPrefix implements Transport: keys prefix + decimal digits only.
func (c *SHM) CleanupPrefix(prefix string) int { return c.retirePrefix(prefix) }

// cleanupSegment retires key's pending segment. Transport's Cleanup has no
// error to return, so a failure is logged (the segment package never logs).
func (c *SHM) cleanupSegment(key string) bool {
	retired, err := c.segments.Cleanup(key)
	if err != nil {
		c.log.Warn("omnishm: cleanup failed", "key", key, "err", err)
	}
	return retired
}

// Reap reclaims consumed frames of this producer's rings, forgets consumed
// segments and drops cached rings of producers that are gone.
func (c *SHM) Reap() { c.ring.Reap() }

// Health implements Transport. Its put and get figures are the per-edge
// ones of Stats summed: a put or a get counts itself once.
func (c *SHM) Health() Health {
	puts, bytes, ringPuts, gets, ringGets := c.stats.totals()
	return Health{
		Puts:              puts,
		Gets:              gets,
		BytesTransferred:  bytes,
		HostRingPuts:      ringPuts,
		HostRingGets:      ringGets,
		HostRingFallbacks: c.ringFallbacks.Load(),
	}
}

// Close implements Transport: it retires this connector's unclaimed
// frames and segments, unlinks its rings, their markers and its FIFO
// (SPEC §9), and releases the rings of other producers it attached.
// Publications already claimed are the receivers'. It runs once; every
// error it meets is returned, joined, and later calls return nil.
func (c *SHM) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		// Waits for a dispatcher being started, and starts none after.
		c.dispatchOnce.Do(func() {})
		var errs []error
		if d := c.dispatcher.Load(); d != nil {
			errs = append(errs, d.close()) // its waiters return ErrClosed
		}
		errs = append(errs, c.closeClaims(), c.ring.Close(), c.segments.Close())
		if c.waiter != nil {
			errs = append(errs, c.waiter.Close())
			c.untrackFIFOs(c.fifos)
		}
		if c.notifier != nil {
			errs = append(errs, c.notifier.Close())
		}
		if joined := errors.Join(errs...); joined != nil {
			err = fmt.Errorf("connector: close: %w", joined)
		}
	})
	return err
}

// Names returns the /dev/shm names of this connector's scope.
func (c *SHM) Names() scope.Names { return c.names }

var _ MessageReceiver = (*SHM)(nil)
