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

// Open returns a shared-memory connector. Rings are allocated lazily on the
// first put of an edge; a receiver with a numeric StageID and wakeups on
// creates its FIFO now.
func Open(opts Options) (*SHM, error) {
	c := &SHM{opts: opts, log: opts.Logger, names: scope.New(opts.WakeupScope)}
	if c.log == nil {
		c.log = slog.Default()
	}
	var err error
	c.ring, err = ring.New(ring.Options{
		Names:    c.names,
		Capacity: opts.HostRingBytes,
		Logger:   c.log,
		OnCreate: c.track,
		OnRemove: c.forget,
	})
	if err != nil {
		return nil, fmt.Errorf("connector: host_ring_bytes: %w", err)
	}
	c.segments = segment.NewProducer(segment.Options{OnCreate: c.track, OnRemove: c.forget})
	if opts.Wakeups && wake.Enabled() {
		c.notifier = wake.NewNotifier(c.names.WakeDir)
		if scope.IsNumeric(opts.StageID) {
			if c.waiter, err = wake.OpenReceiver(c.names.WakeDir, opts.StageID); err != nil {
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
// segment) before Put returns.
func (c *SHM) Put(from, to, key string, payload any) (int, Descriptor, error) {
	if c.closed.Load() {
		return 0, Descriptor{}, ErrClosed
	}
	if err := keys.Check(key); err != nil {
		return 0, Descriptor{}, err
	}
	var plain []byte // the kind-0 bytes, once made
	if c.ring.Capacity() > 0 && scope.IsNumeric(from) && scope.IsNumeric(to) {
		d, ok, b, err := c.putRing(from, to, key, payload)
		if err != nil {
			return 0, Descriptor{}, putError(key, err)
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
			return 0, Descriptor{}, fmt.Errorf("connector: put %q: %w", key, err)
		}
	}
	d, err := c.segments.Put(key, plain)
	if err != nil {
		return 0, Descriptor{}, putError(key, err)
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

// putError wraps a failed put; one that failed because Close ran meanwhile
// is ErrClosed, as a put after Close is (it published nothing).
func putError(key string, err error) error {
	if errors.Is(err, ring.ErrClosed) || errors.Is(err, segment.ErrClosed) {
		err = ErrClosed
	}
	return fmt.Errorf("connector: put %q: %w", key, err)
}

func (c *SHM) published(to string, size int) {
	if c.notifier != nil && scope.IsNumeric(to) {
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
// only that publication (SPEC §9).
func (c *SHM) Get(from, to, key string, desc *Descriptor) (any, int, bool, error) {
	if c.closed.Load() {
		return nil, 0, false, ErrClosed
	}
	if err := keys.Check(key); err != nil {
		return nil, 0, false, err
	}
	var rd *descriptor.RingHandle
	if desc != nil {
		rd = desc.HostRing
	}
	if v, size, ok, err := c.getRing(from, to, key, rd); ok || err != nil || rd != nil {
		return v, size, ok, err
	}
	data, ok, err := segment.Claim(scope.ShmDir, key)
	if err != nil || !ok {
		return nil, 0, false, err
	}
	// data was read into memory of our own: large tensors may keep it.
	v, err := wire.UnmarshalOwned(data)
	if err != nil {
		return nil, 0, false, fmt.Errorf("connector: get %q: %w", key, err)
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

// defaultPollInterval bounds the sleep between polls when no wakeup
// arrives: a producer without wakeups (or a lost hint) is still read.
const defaultPollInterval = 50 * time.Millisecond

// Recv implements Receiver: it blocks until key arrives on edge
// from->StageID. With a wakeup FIFO it sleeps until a producer's put wakes
// it; without one it polls with a bounded backoff.
func (c *SHM) Recv(ctx context.Context, from, key string) (any, int, error) {
	ceiling := c.opts.PollInterval
	if ceiling <= 0 {
		ceiling = defaultPollInterval
	}
	if c.waiter == nil {
		return c.recvPolling(ctx, from, key, ceiling)
	}
	// Note the generation before each Get: a put after the Get moves it, so
	// the Wait that follows cannot sleep through that put's wakeup.
	gen := c.waiter.Generation()
	for {
		v, size, ok, err := c.Get(from, c.opts.StageID, key, nil)
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
	if c.opts.Spin <= 0 || c.ring.Capacity() == 0 || !scope.IsNumeric(from) || !scope.IsNumeric(c.opts.StageID) {
		return nil, 0, false, nil
	}
	for end := time.Now().Add(c.opts.Spin); time.Now().Before(end); {
		if v, size, ok, err := c.getRing(from, c.opts.StageID, key, nil); ok || err != nil {
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
		return nil, 0, false, fmt.Errorf("connector: get %q: %w", key, err)
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
		v, size, ok, err := c.Get(from, c.opts.StageID, key, nil)
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

// Close implements Transport: it retires this connector's frames, removes
// its rings, markers, pending segments and FIFO. It is idempotent.
func (c *SHM) Close() error {
	var errs []error
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		errs = append(errs, c.ring.Close(), c.segments.Close())
		if c.waiter != nil {
			errs = append(errs, c.waiter.Close())
		}
		if c.notifier != nil {
			c.notifier.Close()
		}
	})
	return errors.Join(errs...)
}

// Names returns the /dev/shm names of this connector's scope.
func (c *SHM) Names() scope.Names { return c.names }

var _ Receiver = (*SHM)(nil)
