package ring

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"omnishm/descriptor"
	"omnishm/proc"
	"omnishm/scope"
)

// This file is the producer side (SPEC §3 put): the rings this process
// owns, one per edge, created on the edge's first Put.

// producer is a ring this process owns.
type producer struct {
	name, path string
	edge       edgeKey
	mu         sync.Mutex
	m          *mapping
	ix         index // every ready frame of the ring: only this process puts
	closed     bool
	onRetire   func(descriptor.RingHandle, Retirement) // Options.OnRetire; nil: say nothing
}

// Put publishes a frame of size bytes under key on edge from->to. write
// fills dst (len == size) in ring memory, under the ring lock; dst must not
// be kept. ok=false means refused (ring disabled, non-numeric stage, frame
// over capacity/4, key over 65535 bytes, ring full, edge disabled after a
// setup failure): the caller uses the per-key path; nothing waits for ring
// space. An earlier ready frame of key is retired (SPEC §3). On error ok is
// false too; an error from write publishes nothing and retires nothing.
func (t *Transport) Put(from, to, key string, kind Kind, size int, write func(dst []byte) error) (d descriptor.RingHandle, ok bool, err error) {
	if kind != KindBytes && kind != KindTensors {
		return d, false, fmt.Errorf("ring: put %q: kind %v is not a payload kind", key, kind)
	}
	total := frameTotal(len(key), size)
	if t.capacity == 0 || !scope.IsNumeric(from) || !scope.IsNumeric(to) ||
		total == 0 || total > t.capacity/4 || len(key) > maxKeyLen {
		return d, false, nil
	}
	p, err := t.producer(edgeKey{from, to})
	if p == nil || err != nil {
		return d, false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return d, false, ErrClosed
	}
	return p.put(&t.stats, key, kind, total, size, write)
}

// A Frame is one publication of PutMany: Put's arguments, and, once
// PutMany has tried it, what Put would have returned.
type Frame struct {
	Key   string
	Kind  Kind
	Size  int
	Write func(dst []byte) error // as Put's write: under the ring lock, dst not kept

	Handle descriptor.RingHandle // set by PutMany
	OK     bool                  // set by PutMany: false is Put's refusal, or an error
	Err    error                 // set by PutMany
}

// PutMany publishes frames on edge from->to in order, each as Put would,
// under one ring lock: a producer with several frames queued makes one
// flock pair for all of them, not one each, and its receivers meet the
// lock held once. A frame Put would refuse is refused alone; the others
// still go. It stops after the first frame that fails with an error (a
// failed lock, a write that failed) and returns how many frames it
// tried, whose Handle, OK and Err it set; the rest it leaves refused
// (OK false, no error).
func (t *Transport) PutMany(from, to string, frames []Frame) int {
	for i := range frames {
		frames[i].Handle, frames[i].OK, frames[i].Err = descriptor.RingHandle{}, false, nil
	}
	if len(frames) == 0 || t.capacity == 0 || !scope.IsNumeric(from) || !scope.IsNumeric(to) {
		return len(frames) // every one refused
	}
	p, err := t.producer(edgeKey{from, to})
	switch {
	case err != nil:
		frames[0].Err = err
		return 1
	case p == nil: // the edge is disabled: every one refused
		return len(frames)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		frames[0].Err = ErrClosed
		return 1
	}
	return p.putMany(&t.stats, frames)
}

// putMany is PutMany under p.mu.
func (p *producer) putMany(c *counters, frames []Frame) int {
	if err := c.flock(p.m.fd, unix.LOCK_EX); err != nil {
		frames[0].Err = fmt.Errorf("ring: lock %s: %w", p.name, err)
		return 1
	}
	defer c.flock(p.m.fd, unix.LOCK_UN)
	tail, err := p.reclaimTail()
	if err != nil {
		frames[0].Err = err
		return 1
	}
	for i := range frames {
		f := &frames[i]
		total := frameTotal(len(f.Key), f.Size)
		switch {
		case f.Kind != KindBytes && f.Kind != KindTensors:
			f.Err = fmt.Errorf("ring: put %q: kind %v is not a payload kind", f.Key, f.Kind)
		case total == 0 || total > p.m.capacity/4 || len(f.Key) > maxKeyLen:
			continue // Put's refusal before the lock
		default:
			f.Handle, f.OK, tail, f.Err = p.publish(f.Key, f.Kind, total, f.Size, tail, f.Write)
		}
		if f.Err != nil {
			p.ix.prune(tail)
			return i + 1
		}
	}
	p.ix.prune(tail) // as put: once, with the new frames in the index
	return len(frames)
}

// Unclaimed lists the frames of this Transport's own rings that still wait
// for a receiver (ready, as its producer reads them now), as Put returned
// them; nil when there are none. A producer that waits for its receivers
// (a graceful shutdown) waits on these.
func (t *Transport) Unclaimed() []descriptor.RingHandle {
	var out []descriptor.RingHandle
	for _, p := range t.producerList() {
		p.mu.Lock()
		if !p.closed {
			p.ix.each(func(_ string, pos uint64) bool {
				if f, err := readFrame(p.m.data, pos); err == nil && f.state == stateReady && f.kind != kindPadding {
					out = append(out, descriptor.RingHandle{Name: p.name, Position: pos, Size: int(f.payloadLen)})
				}
				return true
			})
		}
		p.mu.Unlock()
	}
	return out
}

// ownRing is the producer of the ring file name that t created, or nil:
// the published list, without t.mu.
func (t *Transport) ownRing(name string) *producer {
	if list := t.owned.Load(); list != nil {
		for _, p := range *list {
			if p.name == name {
				return p
			}
		}
	}
	return nil
}

// put is Put under p.mu: it places and publishes one frame under the ring
// lock. (Its own function, so that each has few enough returns for its
// defers to be inlined: this is the put path's floor.)
func (p *producer) put(c *counters, key string, kind Kind, total uint64, size int, write func(dst []byte) error) (d descriptor.RingHandle, ok bool, err error) {
	if err := c.flock(p.m.fd, unix.LOCK_EX); err != nil {
		return d, false, fmt.Errorf("ring: lock %s: %w", p.name, err)
	}
	defer c.flock(p.m.fd, unix.LOCK_UN)
	tail, err := p.reclaimTail()
	if err != nil {
		return d, false, err
	}
	d, ok, tail, err = p.publish(key, kind, total, size, tail, write)
	// The index forgets the frames reclaimed only now, with the new one in
	// it: a map a delete empties is reseeded, which costs more than the
	// delete, and one frame in flight would empty it on every put.
	p.ix.prune(tail)
	return d, ok, err
}

// publish places and publishes the frame in a ring reclaimed up to tail,
// and returns the tail it leaves; p.mu and the ring lock are held. Index
// entries before tail are not pruned yet: they name reclaimed frames.
func (p *producer) publish(key string, kind Kind, total uint64, size int, tail uint64, write func(dst []byte) error) (d descriptor.RingHandle, ok bool, _ uint64, err error) {
	data, capacity := p.m.data, p.m.capacity
	head := p.m.head()
	padding, fits := place(capacity, head, tail, total)
	if !fits {
		return d, false, tail, nil
	}
	rewound := false
	if padding == 0 {
		padding = rewind(capacity, head, tail, total)
		rewound = padding > 0
	}
	if padding > 0 {
		writeFrame(data, head, frame{total: uint32(padding), kind: kindPadding, state: stateDone})
		head += padding
	}
	if rewound {
		// The padding is done and was all the ring held: reclaim it now,
		// so the ring's use is this frame's.
		p.m.setTail(head)
		tail = head
	}
	start := offsetIn(head, capacity) + frameHeaderSize
	copy(data[start:], key)
	start += uint64(len(key))
	// Until head moves nothing written past it is visible: a failed write
	// leaves the ring as it was, the earlier version of key still ready.
	if err := write(data[start : start+uint64(size) : start+uint64(size)]); err != nil {
		return d, false, tail, err
	}
	writeFrame(data, head, frame{total: uint32(total), payloadLen: uint32(size), kind: kind, keyLen: uint16(len(key))})
	// Retire an earlier version under the lock every reader takes, before
	// the new frame is published (SPEC §1 one publisher per key). The next
	// put reclaims its space; add replaces its index entry. One before tail
	// was reclaimed: its bytes may be another frame's now.
	if pos, ok := p.ix.lookup(key); ok && pos >= tail {
		p.markDone(pos, RetiredByPut)
	}
	p.m.setHead(head + total)
	p.ix.add(key, head)
	p.ix.cursor = head + total
	return descriptor.RingHandle{Name: p.name, Position: head, Size: size}, true, tail, nil
}

// rewindEmpty is off in tests that lay frames out at positions of their
// choosing.
var rewindEmpty = true

// rewind is the padding that puts a frame into an empty ring at the start
// of its buffer instead of at head (0: at head). Put by put, head walks the
// whole buffer, and every frame would land in memory no cache has held
// since the last lap: with one message in flight on a 64 MiB ring a 64 KiB
// put+get took 21 µs, on a 4 MiB ring 10 (the copies' floor: 3.6). Once
// the receivers have taken everything, starting over at the buffer's start
// reuses the memory the last frames warmed. The padding frame is the one
// SPEC §3 puts before a frame that does not fit the buffer's end, and
// readers skip it alike; it fits because the ring is empty.
func rewind(capacity, head, tail, total uint64) uint64 {
	off := offsetIn(head, capacity)
	if !rewindEmpty || head != tail || off == 0 || total > off {
		return 0
	}
	return capacity - off
}

// reclaim advances tail over done and padding frames and prunes the index;
// p.mu and the ring lock are held.
func (p *producer) reclaim() (uint64, error) {
	tail, err := p.reclaimTail()
	if err == nil {
		p.ix.prune(tail)
	}
	return tail, err
}

// reclaimTail is reclaim but for the index, which the caller prunes.
func (p *producer) reclaimTail() (uint64, error) {
	tail, err := reclaim(p.m.data, p.m.head(), p.m.tail())
	if err != nil {
		return 0, fmt.Errorf("ring: reclaim %s: %w", p.name, err)
	}
	p.m.setTail(tail)
	return tail, nil
}

// each calls f on the indexed keys that s selects: s itself or, byPrefix,
// every key that is s followed by decimal digits (SPEC §9: "" selects the
// all-digit keys, as the seed's isdigit does); f returning false stops.
// p.mu is held.
func (p *producer) each(s string, byPrefix bool, f func(key string, pos uint64) bool) {
	if !byPrefix {
		if pos, ok := p.ix.lookup(s); ok {
			f(s, pos)
		}
		return
	}
	p.ix.each(func(k string, pos uint64) bool {
		rest, ok := strings.CutPrefix(k, s)
		return !ok || !scope.IsNumeric(rest) || f(k, pos)
	})
}

// retire marks the ready frames of the keys s selects (see each) done and
// forgets them; the count of frames retired. p.mu and the ring lock are
// held.
func (p *producer) retire(s string, byPrefix bool) int {
	n := 0
	p.each(s, byPrefix, func(k string, pos uint64) bool {
		p.ix.forget(k)
		if p.markDone(pos, RetiredByCancel) {
			n++
		}
		return true
	})
	return n
}

// markDone retires the frame at pos if it is a ready payload, says so to
// onRetire, and reports whether it was. p.mu and the ring lock are held.
func (p *producer) markDone(pos uint64, why Retirement) bool {
	if f, err := readFrame(p.m.data, pos); err == nil && f.state == stateReady && f.kind != kindPadding {
		markDone(p.m.data, pos)
		if p.onRetire != nil {
			p.onRetire(descriptor.RingHandle{Name: p.name, Position: pos, Size: int(f.payloadLen)}, why)
		}
		return true
	}
	return false
}

// retireAll marks every ready frame done, under the ring lock: a receiver
// that still maps a closed producer's ring must not deliver its frames.
// p.mu is held.
func (p *producer) retireAll(c *counters) error {
	if err := c.flock(p.m.fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("ring: lock %s: %w", p.name, err)
	}
	defer c.flock(p.m.fd, unix.LOCK_UN)
	p.ix.each(func(_ string, pos uint64) bool {
		p.markDone(pos, RetiredByClose)
		return true
	})
	return nil
}

// producer returns the ring of an edge, creating it on first use; nil if
// the edge is disabled after a setup failure.
func (t *Transport) producer(ek edgeKey) (*producer, error) {
	// The put path reads a published list, without t.mu: a process puts on
	// a few edges, and comparing their names costs less than hashing them.
	if list := t.owned.Load(); list != nil && !t.closed.Load() {
		for _, p := range *list {
			if p.edge == ek {
				return p, nil
			}
		}
	}
	t.mu.RLock()
	p, closed, disabled := t.producers[ek], t.closed.Load(), t.disabled[ek]
	t.mu.RUnlock()
	switch {
	case closed:
		return nil, ErrClosed
	case p != nil:
		return p, nil
	case disabled:
		return nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return nil, ErrClosed
	}
	if p := t.producers[ek]; p != nil {
		return p, nil
	}
	if t.disabled[ek] {
		return nil, nil
	}
	p, err := t.setup(ek)
	if err != nil {
		// One warning per edge; from now on the edge uses the per-key path
		// (SPEC §9 setup failure). The connector's logger says it: only
		// here is it known, and the put itself succeeds.
		t.disabled[ek] = true
		if t.onFailure != nil {
			t.onFailure(ek.from, ek.to, err)
		}
		return nil, nil
	}
	t.producers[ek] = p
	owned := make([]*producer, 0, len(t.producers))
	if list := t.owned.Load(); list != nil {
		owned = append(owned, *list...)
	}
	owned = append(owned, p)
	t.owned.Store(&owned)
	return p, nil
}

// setup creates an edge's ring and then its marker (SPEC §2, §3): the
// marker appears only once the ring is initialised. On failure everything
// it created is removed.
func (t *Transport) setup(ek edgeKey) (*producer, error) {
	self, err := proc.Self()
	if err != nil {
		return nil, fmt.Errorf("ring: no start time for this process: %w", err)
	}
	id, err := scope.NewID()
	if err != nil {
		return nil, err
	}
	name := t.names.RingName(ek.from, ek.to, self.PID, id)
	dir := t.dir
	t.usedDir = true
	if err := unix.Mkdir(dir, 0o700); err != nil && err != unix.EEXIST {
		return nil, fmt.Errorf("ring: create %s: %w", dir, err)
	}
	m, err := createRing(scope.Path(name), t.capacity, self, &t.stats, t.onCreate, t.onRemove)
	if err != nil {
		return nil, err
	}
	p := &producer{name: name, path: scope.Path(name), edge: ek, m: m, onRetire: t.onRetire}
	for attempt := 0; ; attempt++ {
		err = updateRegistry(dir, &t.stats, func(dirfd int) error {
			fd, err := unix.Openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			if err != nil {
				return fmt.Errorf("ring: create marker %s/%s: %w", dir, name, err)
			}
			return unix.Close(fd)
		})
		// Another process's Close may remove the empty directory between
		// our mkdir and the marker: make it again.
		if !errors.Is(err, unix.ENOENT) || attempt == 2 {
			break
		}
		if err := unix.Mkdir(dir, 0o700); err != nil && err != unix.EEXIST {
			break
		}
	}
	if err != nil {
		// A marker that cannot be retired is said in the edge's one warning
		// (SPEC §9), and the fallback stands.
		return nil, errors.Join(err, t.release(p))
	}
	return p, nil
}

// release unmaps and unlinks an owned ring, then removes its marker. What
// someone else removed first (a watchdog, prune) is not an error.
func (t *Transport) release(p *producer) error {
	p.m.close()
	var errs []error
	if err := unix.Unlink(p.path); err == nil {
		t.onRemove(p.path)
	} else if err != unix.ENOENT {
		errs = append(errs, fmt.Errorf("ring: remove %s: %w", p.path, err))
	}
	err := updateRegistry(t.dir, &t.stats, func(dirfd int) error {
		if err := unix.Unlinkat(dirfd, p.name, 0); err != nil {
			return fmt.Errorf("ring: remove marker %s/%s: %w", t.dir, p.name, err)
		}
		return nil
	})
	if err != nil && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Cancel retires this process's ready frame of key on every edge; the
// number retired.
func (t *Transport) Cancel(key string) int { return t.cancel(key, false) }

// CancelPrefix retires this process's ready frames whose key is prefix
// followed by decimal digits only (SPEC §9): "req_0_" matches "req_0_12",
// not "req_0_1x" nor "request_0_1".
func (t *Transport) CancelPrefix(prefix string) int { return t.cancel(prefix, true) }

// cancel retires what s selects. A reclaim that finds the ring corrupt is
// not reported here: the retire happened, and the next Put returns it.
func (t *Transport) cancel(s string, byPrefix bool) int {
	n := 0
	for _, p := range t.producerList() {
		p.mu.Lock()
		// Every ready frame of this process's ring is in its index: a ring
		// that indexes no selected key is not locked (SPEC §9 puts that fall
		// back cancel on every edge).
		indexed := false
		p.each(s, byPrefix, func(string, uint64) bool { indexed = true; return false })
		if indexed {
			t.lockAndReclaim(p, func() { n += p.retire(s, byPrefix) })
		}
		p.mu.Unlock()
	}
	return n
}

// lockAndReclaim runs f under p's ring lock, then reclaims; p.mu is held.
func (t *Transport) lockAndReclaim(p *producer, f func()) error {
	if p.closed {
		return nil
	}
	if err := t.stats.flock(p.m.fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("ring: lock %s: %w", p.name, err)
	}
	defer t.stats.flock(p.m.fd, unix.LOCK_UN)
	f()
	_, err := p.reclaim()
	return err
}

func (t *Transport) producerList() []*producer {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ps := make([]*producer, 0, len(t.producers))
	for _, p := range t.producers {
		ps = append(ps, p)
	}
	return ps
}
