package ring

import (
	"errors"
	"slices"

	"golang.org/x/sys/unix"
)

// This file serves a receiver that waits on many keys at once (a
// connector's receive dispatcher): Sweep claims, in one pass over an edge,
// every newly published frame somebody waits for, and Changes tells it when
// discovery has something new.

// SweepStats says what one Sweep did: for its caller's scheduling, and for
// tests that count the work per delivered message.
type SweepStats struct {
	Moved bool // some ring had frames published since the last Sweep
	// Frames counts the frames published since the last Sweep (claimed
	// since or not) that scans have passed: each put of a producer that
	// wakes its receivers is one, so a caller can tell whether a wakeup
	// was for these rings.
	Frames int
	Busy   bool // some ring's lock was held by another process: its new frames wait for the next Sweep
	Scans  int  // rings scanned under their lock
	Claims int  // frames claimed (deliver calls)
}

// Sweep claims, on edge from->to, the ready frames that want accepts. It
// discovers new producers first when the registry changed (as Get does),
// then visits each attached ring of the edge once: if frames were published
// since its last scan, or its index holds one of keys, it takes the ring
// lock without waiting (SPEC §3: contention is a miss, reported as Busy),
// scans the new frames, and offers want each new ready frame and each
// ready frame of keys. For every frame want accepts, the payload is
// decoded under the lock (decode as in Get), the frame is marked done, and
// deliver is called exactly once, after the locks are released, with the
// key and what was taken, or the decode error (the frame is consumed all
// the same). Frames of a dead producer are never offered (SPEC §7). A ring
// whose head did not move and that indexes none of keys costs no system
// call.
//
// want runs with the ring lock held: it must be quick and must not call the
// Transport. deliver may. The error is a ring found corrupt, or a failed
// discovery.
func (t *Transport) Sweep(from, to string, keys []string, want func(key string) bool, decode func(Kind, []byte) (any, error), deliver func(key string, got Taken, err error)) (SweepStats, error) {
	var st SweepStats
	readers, current, ok := t.snapshot(from, to)
	if !ok {
		return st, nil
	}
	var errs []error
	if !current {
		fresh, err := t.discover(edgeKey{from, to}, readers)
		errs = append(errs, err)
		readers = append(slices.Clip(readers), fresh...)
	}
	// The deliveries' buffer of the last Sweep (a receive dispatcher
	// sweeps after every wakeup), emptied: a Sweep allocates none. One
	// running meanwhile makes its own.
	buf := t.sweepBuf.Swap(nil)
	if buf == nil {
		buf = new([]delivery)
	}
	out, used := *buf, 0
	defer func() {
		clear(out[:used]) // the payloads are the waiters'
		*buf = out[:0]
		t.sweepBuf.Store(buf)
	}()
	sawDead := false
	visit := func(rs []*reader) {
		for _, r := range rs {
			out = out[:0]
			rst, dead, err := r.sweep(&t.stats, keys, want, decode, &out)
			used = max(used, len(out))
			st.Moved = st.Moved || rst.Moved
			st.Frames += rst.Frames
			st.Busy = st.Busy || rst.Busy
			st.Scans += rst.Scans
			st.Claims += len(out)
			sawDead = sawDead || dead
			if dead && err != nil {
				t.rejectReader(r, err) // contained: reported once, never an error per call
				err = nil
			}
			if err != nil {
				errs = append(errs, err)
			}
			for _, d := range out {
				deliver(d.key, d.got, d.err)
			}
		}
	}
	visit(readers)
	if sawDead {
		// Drop the dead rings now (their frames are never delivered), and
		// sweep whatever discovery attached meanwhile.
		fresh, err := t.discover(edgeKey{from, to}, readers)
		errs = append(errs, err)
		visit(fresh)
	}
	return st, errors.Join(errs...)
}

// delivery is one frame a sweep claimed, delivered once the locks are
// released.
type delivery struct {
	key string
	got Taken
	err error
}

// sweep is Sweep on one ring: claimed frames are appended to out. dead
// reports a ring to drop.
//
// r.swept marks how far sweeps have offered frames: the frames after it
// are new to Sweep even when another caller's Get has scanned them since
// (its scan indexed them, so they are offered from the index).
func (r *reader) sweep(c *counters, keys []string, want func(string) bool, decode func(Kind, []byte) (any, error), out *[]delivery) (st SweepStats, dead bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.gone() {
		return st, true, nil
	}
	head := r.m.head()
	st.Moved = head != r.swept
	defer func() {
		st.Frames = int(r.ix.frames - r.sweptFrames)
		r.sweptFrames = r.ix.frames
	}()
	if head == r.ix.cursor && !r.ix.indexedSince(r.swept) && !r.indexesAny(keys) {
		r.swept = head // the frames since were consumed or retired
		return st, false, nil
	}
	if err := c.flock(r.m.fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if err == errBusy {
			c.busy.Add(1)
			st.Busy = true
			return st, false, nil
		}
		return st, false, r.lockError(err)
	}
	defer c.flock(r.m.fd, unix.LOCK_UN)
	st.Scans = 1
	if err := r.scanLocked(c); err != nil {
		return st, true, err
	}
	checked := false
	offer := func(key string, pos uint64) bool {
		f, ready, ferr := r.readyLocked(key, pos)
		if ferr != nil {
			dead, err = true, ferr
			return false
		}
		if !ready {
			return true
		}
		if !checked {
			// Once per sweep, before the first frame is offered: a dead
			// producer's frames are never delivered (SPEC §7).
			checked = true
			if !r.alive(c) {
				r.dead.Store(true)
				dead = true
				return false
			}
		}
		if want(key) {
			got, derr := r.takeLocked(c, key, pos, f, decode)
			*out = append(*out, delivery{key, got, derr})
		}
		return true
	}
	for _, e := range r.ix.since(r.swept) {
		if p, indexed := r.ix.lookup(e.key); indexed && p == e.pos && !offer(e.key, e.pos) {
			return st, dead, err
		}
	}
	r.swept = r.ix.cursor
	for _, key := range keys {
		if pos, indexed := r.ix.lookup(key); indexed && !offer(key, pos) {
			return st, dead, err
		}
	}
	return st, dead, err
}

// indexesAny reports whether the ring's index holds one of keys; r.mu is
// held.
func (r *reader) indexesAny(keys []string) bool {
	if r.ix.empty() {
		return false
	}
	for _, k := range keys {
		if _, ok := r.ix.lookup(k); ok {
			return true
		}
	}
	return false
}

// Changes receives a value, coalesced, when a receiver waiting on this
// Transport's edges should sweep them again because discovery may have
// something new: the background watcher saw a registry event (a producer's
// ring appeared or went, SPEC §7), or the producer of an attached ring
// exited (its pidfd, through the runtime poller). Frames published in rings
// already attached move nothing here: their producers' wakeups (SPEC §8)
// tell of them.
func (t *Transport) Changes() <-chan struct{} { return t.changes }

func (t *Transport) changed() {
	select {
	case t.changes <- struct{}{}:
	default:
	}
}

// forwardRegistry tells Changes of w's events until w is closed.
func (t *Transport) forwardRegistry(w *watcher) {
	for {
		select {
		case <-w.fs.C():
			t.changed()
		case <-w.stop:
			return
		}
	}
}

// forwardExit tells Changes when r's producer exits, unless r is closed
// first.
func (t *Transport) forwardExit(r *reader) {
	select {
	case <-r.exited:
		t.changed()
	case <-r.end:
	}
}

// Unswept reports, without a system call, whether a Sweep of edge from->to
// may find frames the last one did not: an attached ring's head moved
// since its last sweep, its producer is gone, or discovery is not current
// (a producer may be new). A receiver that announced a sleep
// (wake.Receiver.BeginSleep) asks it before it sleeps: a producer that
// skipped that receiver's wakeup (wake.Notifier.NotifyRing) published
// before the announcement, so its frame shows here.
func (t *Transport) Unswept(from, to string) bool {
	readers, current, ok := t.snapshot(from, to)
	if !ok {
		return false
	}
	if !current {
		return true
	}
	for _, r := range readers {
		if r.unswept() {
			return true
		}
	}
	return false
}

func (r *reader) unswept() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.closed && (r.gone() || r.m.head() != r.swept)
}

// Contended counts the receives and sweeps of this Transport that found a
// ring's lock held by another process (SPEC §3: a miss). A receiver that
// waits for a frame and sees it move may look again soon rather than
// sleep: the holder is writing a frame, or taking one, and lets go within
// a copy's time.
func (t *Transport) Contended() uint64 { return t.stats.busy.Load() }
