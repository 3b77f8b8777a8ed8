package connector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"omnishm/watchdog"
	"omnishm/wire"
)

// SHM is the shared-memory connector: vLLM-Omni's SharedMemoryConnector in
// Go. Small payloads of numeric edges go through a host ring per producer
// and edge; large ones, those arriving while the ring is full, and all of
// them when the ring is disabled, through per-key segments. It is safe for
// concurrent use by many goroutines.
type SHM struct {
	opts  Options
	log   *slog.Logger
	names scope.Names

	ring     *ring.Transport
	segments *segment.Producer
	notifier *wake.Notifier // nil when wakeups are off
	waiter   *wake.Receiver // nil without a numeric stage or wakeups

	closeOnce sync.Once
	closed    atomic.Bool

	puts, gets, bytes                 atomic.Uint64
	ringPuts, ringGets, ringFallbacks atomic.Uint64
	watchdogWarned                    atomic.Bool
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
	c := &SHM{opts: opts, log: opts.Logger, names: scope.New(opts.WakeupScope)}
	c.ring, err = ring.New(ring.Options{
		Names:    c.names,
		Capacity: opts.HostRingBytes,
		OnSetupFailure: func(from, to string, err error) {
			c.log.Warn("host ring unavailable; using per-key SHM", "from", from, "to", to, "err", err)
		},
		OnCreate: c.track,
		OnRemove: c.forget,
	})
	if err != nil {
		return nil, fmt.Errorf("connector: open: %w", err)
	}
	c.segments = segment.NewProducer(segment.Options{OnCreate: c.track, OnRemove: c.forget})
	if !opts.DisableWakeups && wake.Enabled() {
		c.notifier = wake.NewNotifier(c.names.WakeDir)
		if opts.StageID != NoStage {
			if c.waiter, err = wake.OpenReceiver(c.names.WakeDir, string(opts.StageID)); err != nil {
				// Wakeups are hints (SPEC §8): Recv falls back to polling.
				c.log.Warn("omnishm: wakeup FIFO unavailable; receives will poll", "stage", opts.StageID, "err", err)
				c.waiter = nil
			}
		}
	}
	return c, nil
}

// track and forget tell the crash watchdog which files this process owns,
// so a producer killed by SIGKILL leaves no payload behind.
func (c *SHM) track(path string) {
	if err := watchdog.Default().Track(path); err != nil && !c.watchdogWarned.Swap(true) {
		c.log.Warn("omnishm: crash watchdog unavailable; a killed producer may leave files in /dev/shm", "err", err)
	}
}

func (c *SHM) forget(path string) { watchdog.Default().Forget(path) }

// Put implements Transport. The payload is copied (into the ring or a
// segment) before Put returns. The error wraps ErrBadKey for a key that
// cannot name a publication (nothing was touched) and ErrClosed once the
// connector is closed.
func (c *SHM) Put(from, to, key string, payload any) (int, Descriptor, error) {
	if c.closed.Load() {
		return 0, Descriptor{}, ErrClosed
	}
	if err := keys.Check(key); err != nil {
		return 0, Descriptor{}, keyError("put", key, err)
	}
	var plain []byte // the kind-0 bytes, once made
	if c.ring.Capacity() > 0 && numeric(from) && numeric(to) {
		d, ok, b, err := c.putRing(from, to, key, payload)
		if err != nil {
			return 0, Descriptor{}, keyError("put", key, err)
		}
		if ok {
			// A previous version of the key may sit in a segment (SPEC §9).
			if c.segments.Pending(key) {
				c.cleanupSegment(key)
			}
			c.published(to, d.Size)
			c.ringPuts.Add(1)
			return d.Size, Descriptor{HostRing: &d, Size: d.Size}, nil
		}
		plain = b
	}
	c.ringFallbacks.Add(1)
	if plain == nil {
		var err error
		if plain, err = wire.Marshal(payload); err != nil {
			return 0, Descriptor{}, keyError("put", key, err)
		}
	}
	d, err := c.segments.Put(key, plain)
	if err != nil {
		return 0, Descriptor{}, keyError("put", key, err)
	}
	// A successful fallback replaces an unclaimed ring version, too.
	c.ring.Cancel(key)
	c.published(to, d.Size)
	return d.Size, Descriptor{Shm: &d, Size: d.Size}, nil
}

// putRing offers the payload to the edge's ring as the seed does (SPEC §9):
// a tensor frame when it has tensors and the frame fits, else its kind-0
// bytes. ok=false is a refusal; plain then holds the kind-0 bytes if they
// were made, for the per-key path to reuse.
func (c *SHM) putRing(from, to, key string, payload any) (d descriptor.RingHandle, ok bool, plain []byte, err error) {
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
		// Refused: the per-key path needs the kind-0 bytes.
		plain = make([]byte, p.Size())
		return d, false, plain, p.Write(plain)
	case errors.Is(err, frame.ErrTooLarge):
		// The plain form may still fit (no frame header, no alignment), and
		// the per-key path needs it anyway.
		if plain, err = wire.Marshal(payload); err != nil {
			return d, false, nil, err
		}
		d, ok, err = c.ring.Put(from, to, key, ring.KindBytes, len(plain), func(dst []byte) error {
			copy(dst, plain)
			return nil
		})
		return d, ok, plain, err
	}
	return d, false, nil, err
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

func (c *SHM) published(to string, size int) {
	if c.notifier != nil && numeric(to) {
		c.notifier.Notify(to)
	}
	c.puts.Add(1)
	c.bytes.Add(uint64(size))
}

// decodeRing turns a ring payload into owned values while the ring lock is
// held: nothing returned aliases ring memory.
func decodeRing(kind ring.Kind, payload []byte) (any, error) {
	if kind == ring.KindTensors {
		return frame.Decode(payload)
	}
	return wire.Unmarshal(payload)
}

// Get implements Transport. Without a descriptor it tries the edge's rings,
// then discovery, then the per-key segment; with a ring descriptor it reads
// only that publication (SPEC §9). The payload is the caller's: it was
// decoded into memory of its own. The error wraps ErrBadKey, ErrBadDescriptor
// (a descriptor naming no publication of this protocol) or ErrClosed where
// those apply.
func (c *SHM) Get(from, to, key string, desc *Descriptor) (any, int, bool, error) {
	if c.closed.Load() {
		return nil, 0, false, ErrClosed
	}
	if err := keys.Check(key); err != nil {
		return nil, 0, false, keyError("get", key, err)
	}
	var rd *descriptor.RingHandle
	if desc != nil {
		if err := desc.Validate(); err != nil {
			return nil, 0, false, keyError("get", key, err)
		}
		rd = desc.HostRing
	}
	if v, size, ok, err := c.getRing(from, to, key, rd); ok || err != nil || rd != nil {
		return v, size, ok, err
	}
	data, ok, err := segment.Claim(scope.ShmDir, key)
	if err != nil {
		return nil, 0, false, keyError("get", key, err)
	}
	if !ok {
		return nil, 0, false, nil
	}
	// data was read into memory of our own: large tensors may keep it.
	v, err := wire.UnmarshalOwned(data)
	if err != nil {
		return nil, 0, false, keyError("get", key, err)
	}
	c.gets.Add(1)
	return v, len(data), true, nil
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
// from->Stage(). With a wakeup FIFO it sleeps until a producer's put wakes
// it; without one it polls with a bounded backoff. Either way it polls at
// least every Options.PollInterval, so a lost wakeup only costs latency.
func (c *SHM) Recv(ctx context.Context, from, key string) (any, int, error) {
	if c.opts.StageID == NoStage {
		return nil, 0, fmt.Errorf("connector: recv %q: %w: this connector has no Options.StageID", keys.Shorten(key), ErrBadStage)
	}
	ceiling := c.opts.PollInterval
	if c.waiter == nil {
		return c.recvPolling(ctx, from, key, ceiling)
	}
	// Note the generation before each Get: a put after the Get moves it, so
	// the Wait that follows cannot sleep through that put's wakeup.
	to := string(c.opts.StageID)
	gen := c.waiter.Generation()
	for {
		v, size, ok, err := c.Get(from, to, key, nil)
		if err != nil || ok {
			return v, size, err
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		if v, size, ok, err := c.spin(from, key); err != nil || ok {
			return v, size, err
		}
		var woken bool
		if ctx.Done() == nil {
			// No cancellation to watch: a plain timeout costs no timer.
			gen, woken = c.waiter.WaitForChange(gen, ceiling)
		} else {
			wctx, cancel := context.WithTimeout(ctx, ceiling)
			var werr error
			gen, werr = c.waiter.Wait(wctx, gen)
			cancel()
			woken = werr == nil
		}
		if woken {
			// Woken by a put: a producer new to this edge may have
			// registered just before it, ahead of the ring's watcher.
			c.ring.Refresh()
		}
	}
}

// spin polls the edge's rings, without a system call per miss, for up to
// Options.Spin before Recv goes to sleep: a frame put meanwhile is read
// without paying a sleep and a wakeup, which cost more than a small copy.
func (c *SHM) spin(from, key string) (any, int, bool, error) {
	if c.opts.Spin <= 0 || c.ring.Capacity() == 0 || !numeric(from) {
		return nil, 0, false, nil
	}
	to := string(c.opts.StageID)
	for end := time.Now().Add(c.opts.Spin); time.Now().Before(end); {
		if v, size, ok, err := c.getRing(from, to, key, nil); ok || err != nil {
			return v, size, ok, err
		}
		runtime.Gosched()
	}
	return nil, 0, false, nil
}

// getRing is the ring part of Get, counted in Health.
func (c *SHM) getRing(from, to, key string, rd *descriptor.RingHandle) (any, int, bool, error) {
	v, size, ok, err := c.ring.Get(from, to, key, rd, decodeRing)
	if err != nil {
		return nil, 0, false, keyError("get", key, err)
	}
	if ok {
		c.gets.Add(1)
		c.ringGets.Add(1)
	}
	return v, size, ok, nil
}

// recvPolling is Recv without a wakeup FIFO: poll with a bounded backoff.
func (c *SHM) recvPolling(ctx context.Context, from, key string, ceiling time.Duration) (any, int, error) {
	backoff := min(100*time.Microsecond, ceiling)
	for {
		v, size, ok, err := c.Get(from, string(c.opts.StageID), key, nil)
		if err != nil || ok {
			return v, size, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, 0, ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, ceiling)
	}
}

// Cleanup implements Transport: it retires key on both paths.
func (c *SHM) Cleanup(key string) bool {
	if keys.Check(key) != nil {
		return false
	}
	cancelled := c.ring.Cancel(key) > 0
	return c.cleanupSegment(key) || cancelled
}

// CleanupPrefix implements Transport: keys prefix + decimal digits only.
func (c *SHM) CleanupPrefix(prefix string) int {
	n, err := c.segments.CleanupPrefix(prefix)
	if err != nil {
		c.log.Warn("omnishm: cleanup failed", "prefix", prefix, "err", err)
	}
	return n + c.ring.CancelPrefix(prefix)
}

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

// Health implements Transport.
func (c *SHM) Health() Health {
	return Health{
		Puts:              c.puts.Load(),
		Gets:              c.gets.Load(),
		BytesTransferred:  c.bytes.Load(),
		HostRingPuts:      c.ringPuts.Load(),
		HostRingGets:      c.ringGets.Load(),
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
		errs := []error{c.ring.Close(), c.segments.Close()}
		if c.waiter != nil {
			errs = append(errs, c.waiter.Close())
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

var _ Receiver = (*SHM)(nil)
