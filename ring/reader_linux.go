package ring

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"omnishm/descriptor"
	"omnishm/proc"
	"omnishm/scope"
)

// This file is the receiver side (SPEC §3 get, §7 attach): another
// producer's ring mapped by this process, and claims from it.

// ErrDeclined, wrapped by a decode function's error, declines the frame
// without claiming it: it stays ready for a later receive (a receiver
// whose supplied memory was too small for it tries again). Nothing may
// have been written from the frame then.
var ErrDeclined = errors.New("ring: frame declined by the receiver")

// reader is another producer's ring mapped by this process.
type reader struct {
	name   string
	mu     sync.Mutex
	m      *mapping
	ix     index
	id     proc.ID
	self   bool         // a ring of this process: its producer is alive by definition
	h      *proc.Handle // the producer's pidfd; nil without one (then start times tell)
	exited <-chan struct{}
	dead   atomic.Bool   // the producer was seen gone, or the ring is corrupt
	closed bool          // under mu
	end    chan struct{} // closed by close: stops the exit forwarder
	swept  uint64        // Sweep has offered the frames before this position; under mu
	// index.frames at the last sweep; under mu.
	sweptFrames uint64
}

func (r *reader) lockError(err error) error { return fmt.Errorf("ring: lock %s: %w", r.name, err) }

// gone reports, without a system call, that the ring must be dropped: its
// producer's pidfd became readable (seen through the runtime poller) or it
// was found dead or corrupt.
func (r *reader) gone() bool {
	if r.dead.Load() {
		return true
	}
	select {
	case <-r.exited: // nil without a pidfd: never ready
		return true
	default:
		return false
	}
}

// receive tries to take key from one attached ring. dead reports a ring to
// drop (producer gone, or corrupt). A key absent from the index of a ring
// whose head did not move is a miss without the ring lock or a system call
// (SPEC §3 "a miss must be cheap").
func (r *reader) receive(c *counters, key string, desc *descriptor.RingHandle, decode func(Kind, []byte) (any, error), v *Vouch) (got Taken, ok, dead bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.gone() {
		return got, false, true, nil
	}
	// An unchanged head cannot have published a new key since this
	// receiver's last locked scan.
	if _, indexed := r.ix.lookup(key); !indexed && r.m.head() == r.ix.cursor {
		return got, false, false, nil
	}
	if err := c.flock(r.m.fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if err == errBusy {
			c.busy.Add(1)
			return got, false, false, nil
		}
		return got, false, false, r.lockError(err)
	}
	// Unlocked without a defer: decode never panics on ring bytes.
	got, ok, dead, err = r.receiveLocked(c, key, desc, decode, v)
	c.flock(r.m.fd, unix.LOCK_UN)
	return got, ok, dead, err
}

// receiveLocked is receive under the ring lock; r.mu is held.
func (r *reader) receiveLocked(c *counters, key string, desc *descriptor.RingHandle, decode func(Kind, []byte) (any, error), v *Vouch) (got Taken, ok, dead bool, err error) {
	pos, f, found, err := r.ix.scanFor(r.m.data, r.m.head(), r.m.tail(), key)
	if err != nil {
		r.dead.Store(true)
		return got, false, true, fmt.Errorf("ring: scan %s: %w", r.name, err)
	}
	if found && desc != nil && pos != desc.Position {
		r.ix.add(key, pos) // not the one asked for: indexed, as scan does
		return got, false, false, nil
	}
	if !found {
		var indexed, ready bool
		if pos, indexed = r.ix.lookup(key); !indexed || desc != nil && pos != desc.Position {
			return got, false, false, nil
		}
		// Indexed by an earlier scan: it may have been claimed since.
		if f, ready, err = r.readyLocked(key, pos); err != nil || !ready {
			return got, false, err != nil, err
		}
	}
	// Frames of a dead producer are never delivered (SPEC §7): check now,
	// not only when the runtime poller gets to its pidfd, unless the
	// caller's Vouch checked it moments ago.
	if !v.covers(r) && !r.alive(c) {
		r.dead.Store(true)
		if found {
			r.ix.add(key, pos)
		}
		return got, false, true, nil
	}
	got, err = r.takeLocked(c, key, pos, f, decode)
	if found && errors.Is(err, ErrDeclined) {
		r.ix.add(key, pos) // left ready: indexed, as scan does
	}
	return got, err == nil, false, err
}

// scanLocked indexes the frames published since the last scan (SPEC §3
// get). A corrupt ring is marked dead. r.mu and the ring lock are held.
func (r *reader) scanLocked(c *counters) error {
	if err := r.ix.scan(r.m.data, r.m.head(), r.m.tail()); err != nil {
		r.dead.Store(true)
		return fmt.Errorf("ring: scan %s: %w", r.name, err)
	}
	return nil
}

// readyLocked reads the indexed frame of key at pos: ready=false (and the
// entry forgotten) once another receiver or the producer retired it. A
// corrupt frame marks the ring dead. r.mu and the ring lock are held.
func (r *reader) readyLocked(key string, pos uint64) (frame, bool, error) {
	f, err := readFrame(r.m.data, pos)
	if err != nil {
		r.dead.Store(true)
		return f, false, fmt.Errorf("ring: read %s: %w", r.name, err)
	}
	if f.state != stateReady {
		r.ix.forget(key)
		return f, false, nil
	}
	return f, true, nil
}

// takeLocked claims the ready frame f of key at pos: it decodes the payload
// into memory of the caller's and marks the frame done, even if decode
// fails, as the Python reader does (a payload that cannot be decoded is not
// offered again), but for a decode error wrapping ErrDeclined. r.mu and
// the ring lock are held, the producer checked.
func (r *reader) takeLocked(c *counters, key string, pos uint64, f frame, decode func(Kind, []byte) (any, error)) (Taken, error) {
	v, err := decode(f.kind, framePayload(r.m.data, pos, f))
	if errors.Is(err, ErrDeclined) {
		// The receiver had no room for it (its supplied memory is too
		// small): the frame stays ready, indexed, for a later receive.
		return Taken{}, fmt.Errorf("ring: decode %q from %s: %w", key, r.name, err)
	}
	r.ix.forget(key)
	markDone(r.m.data, pos)
	if err != nil {
		return Taken{}, fmt.Errorf("ring: decode %q from %s: %w", key, r.name, err)
	}
	return Taken{Value: v, Size: int(f.payloadLen), Producer: r.id}, nil
}

// A Vouch records the producers of an edge's attached rings that a
// receiver found alive (Transport.Vouch). A receive given it
// (ReceiveVouched) does not check those producers again before it claims
// (SPEC §7): a receiver that spins on a key makes the check between its
// tries, and the try that finds the frame makes one system call fewer. The
// caller keeps a Vouch to itself and makes it again often: a receive it is
// given treats the producers as alive as of the Vouch, not of the claim.
// The zero Vouch vouches for none.
type Vouch struct {
	readers [4]*reader // the first producers of the edge found alive; more are checked as usual
	n       int
}

// covers reports whether v vouches for r's producer; a nil v vouches for
// none.
func (v *Vouch) covers(r *reader) bool {
	if v == nil {
		return false
	}
	for _, x := range v.readers[:v.n] {
		if x == r {
			return true
		}
	}
	return false
}

// Vouch checks the producers of edge from->to's attached rings now, as a
// claim would, and sets v to those found alive. It makes one system call
// per ring of another process (its pidfd's poll) and takes no ring lock.
func (t *Transport) Vouch(from, to string, v *Vouch) {
	v.n = 0
	readers, _, ok := t.snapshot(from, to)
	if !ok {
		return
	}
	for _, r := range readers {
		if v.n == len(v.readers) {
			return
		}
		if !r.gone() && r.alive(&t.stats) {
			v.readers[v.n] = r
			v.n++
		}
	}
}

// alive checks the producer now: its pidfd is not readable or, without
// one, its start time still matches. Unknown (an unreadable /proc) is not
// dead: it never drops a ring.
func (r *reader) alive(c *counters) bool {
	if r.self {
		return true
	}
	c.livenessChecks.Add(1)
	if r.h != nil {
		return !r.h.Exited()
	}
	return proc.Check(r.id) != proc.Dead
}

func (r *reader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	close(r.end)
	r.m.close()
	if r.h != nil {
		r.h.Close()
	}
	r.ix = index{}
}

func (t *Transport) getDescribed(key string, desc *descriptor.RingHandle, decode func(Kind, []byte) (any, error)) (Taken, bool, error) {
	if !scope.ValidRingName(t.uid, desc.Name) {
		return Taken{}, false, fmt.Errorf("%w: %q", ErrName, desc.Name)
	}
	t.mu.RLock()
	r, closed := t.readers[desc.Name], t.closed.Load()
	t.mu.RUnlock()
	if closed {
		return Taken{}, false, nil
	}
	if r == nil {
		t.mu.Lock()
		if t.closed.Load() || t.stillRejectedLocked(desc.Name) {
			t.mu.Unlock()
			return Taken{}, false, nil
		}
		if r = t.readers[desc.Name]; r == nil {
			var err error
			if r, err = t.attach(desc.Name); err != nil {
				t.mu.Unlock()
				if errors.Is(err, errGone) || errors.Is(err, errDead) || errors.Is(err, errBusy) || errors.Is(err, errRejected) {
					return Taken{}, false, nil
				}
				return Taken{}, false, err
			}
			t.addReaderLocked(r)
		}
		t.mu.Unlock()
	}
	got, ok, dead, err := r.receive(&t.stats, key, desc, decode, nil)
	if dead && err != nil {
		t.rejectReader(r, err)
		return Taken{}, false, nil
	}
	if ok || err != nil {
		return got, ok, err
	}
	// As the Python receiver: a miss on a descriptor releases rings whose
	// producer or file is gone.
	t.mu.Lock()
	t.reapReadersLocked()
	t.mu.Unlock()
	return Taken{}, false, nil
}

// attach maps a peer's ring and checks who made it (SPEC §7): errGone if
// the file is absent, errDead if its producer is proven gone, errBusy on
// lock contention, errRejected for a bad header (remembered and reported
// once). A producer whose liveness cannot be told is an error, retried at
// the next Get, never errDead. t.mu is held.
func (t *Transport) attach(name string) (*reader, error) {
	m, h, id, err := attachRing(scope.Path(name), &t.stats)
	if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotInitialized) {
		// A marker appears only once its ring's header is written (SPEC §2),
		// and a descriptor only after a put: an unwritten header is not a
		// ring still being made.
		t.rejectLocked(name, id, err)
		return nil, errRejected
	}
	if err != nil {
		return nil, err
	}
	r := &reader{name: name, m: m, id: h.Creator(), self: proc.IsSelf(h.Creator()), end: make(chan struct{})}
	if r.self {
		return r, nil
	}
	handle, err := proc.Open(r.id)
	switch {
	case err == nil:
		r.h, r.exited = handle, handle.Done()
		go t.forwardExit(r)
		return r, nil
	case errors.Is(err, proc.ErrNoPidfd):
		// Without pidfds the start time tells (SPEC §7).
		switch proc.Check(r.id) {
		case proc.Alive:
			return r, nil
		case proc.Dead:
			err = errDead
		default:
			err = fmt.Errorf("ring: attach %s: cannot tell whether producer %v runs", name, r.id)
		}
	case errors.Is(err, proc.ErrNoProcess):
		err = errDead // exited, or its pid was reused
	default:
		err = fmt.Errorf("ring: attach %s: %w", name, err)
	}
	m.close()
	return nil, err
}

// errRejected: a ring that failed validation, reported and remembered.
var errRejected = errors.New("ring: rejected as corrupt")

// rejectReader drops an attached ring found corrupt and remembers it, so
// that it is reported once and not attached again until its file or
// marker changes; the edge's other rings and its per-key path go on.
func (t *Transport) rejectReader(r *reader, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() || t.readers[r.name] != r {
		return // dropped meanwhile (by another goroutine that met it too)
	}
	var id fileID
	var st unix.Stat_t
	if unix.Fstat(r.m.fd, &st) == nil { // the fd, not the name: what was read
		id = idOf(&st)
	}
	t.rejectLocked(r.name, id, err)
	t.dropReaderLocked(r)
}

// rejectLocked remembers a corrupt ring with its marker and reports it.
// t.mu is held.
func (t *Transport) rejectLocked(name string, id fileID, err error) {
	var st unix.Stat_t
	if unix.Lstat(t.names.MarkerPath(name), &st) == nil {
		id.marker = st.Ino
	}
	t.rejected[name] = id
	if t.onReject != nil {
		t.onReject(name, err)
	}
}

// stillRejectedLocked reports whether name was rejected and neither its
// ring file nor its marker changed since. t.mu is held.
func (t *Transport) stillRejectedLocked(name string) bool {
	was, ok := t.rejected[name]
	if !ok {
		return false
	}
	var st unix.Stat_t
	now := fileID{}
	if unix.Lstat(scope.Path(name), &st) == nil {
		now = idOf(&st)
	}
	if unix.Lstat(t.names.MarkerPath(name), &st) == nil {
		now.marker = st.Ino
	}
	if now != was {
		delete(t.rejected, name)
		return false
	}
	return true
}

// forgetRejectedLocked forgets rejected rings of an edge whose marker is
// no longer listed. t.mu is held.
func (t *Transport) forgetRejectedLocked(prefix string, listed []string) {
	for name := range t.rejected {
		if strings.HasPrefix(name, prefix) && !slices.Contains(listed, name) {
			delete(t.rejected, name)
		}
	}
}

// TakeReady claims, from the rings of edge from->to attached now, the
// ready frames of keys in keys' order, stopping at the first key that no
// ring holds ready: a stream receiver that got chunk n takes the chunks
// after it that are there already, each ring locked once for all of them
// rather than once per chunk (and its producer checked once). For each
// frame taken, deliver is called once, in keys' order, after the ring
// lock is released, with what was taken or the decode error; a decode
// error ends the run (the frame is consumed all the same, as in Receive).
// It returns how many frames it delivered.
//
// A run starts only at a key that this receiver's last scan of the ring
// indexed (by a Receive, Sweep or TakeReady); once the ring is locked, the
// run goes on through the frames published since. It looks only at the
// rings attached already (Receive and Sweep discover new producers) and
// never waits: a ring whose lock is held is skipped. A ring whose index
// does not hold keys[0] costs no system call. The error is a ring found corrupt, or a lock that
// failed.
func (t *Transport) TakeReady(from, to string, keys []string, decode func(Kind, []byte) (any, error), deliver func(key string, got Taken, err error)) (int, error) {
	// No discovery: a ring attached now has no key indexed yet, so it
	// could start no run; Receive attaches it. A miss costs no stat.
	readers, _, ok := t.snapshot(from, to)
	if !ok {
		return 0, nil
	}
	var (
		out   []delivery
		errs  []error
		taken int
	)
	for more := true; more && taken < len(keys); {
		more = false
		for _, r := range readers {
			out = out[:0]
			dead, err := r.takeRun(&t.stats, keys[taken:], decode, &out)
			if dead && err != nil {
				t.rejectReader(r, err) // contained, as in Sweep
				err = nil
			}
			errs = append(errs, err)
			for _, d := range out {
				deliver(d.key, d.got, d.err)
				if d.err != nil {
					return taken + 1, errors.Join(errs...)
				}
				taken++
			}
			// Another ring may hold the key this one stopped at.
			more = more || len(out) > 0
			if taken == len(keys) {
				break
			}
		}
	}
	return taken, errors.Join(errs...)
}

// takeRun is TakeReady on one ring: it appends to out the frames of the
// longest run of keys, from the first, that the ring holds ready. dead
// reports a ring to drop.
func (r *reader) takeRun(c *counters, keys []string, decode func(Kind, []byte) (any, error), out *[]delivery) (dead bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.gone() {
		return true, nil
	}
	// The run starts at keys[0], and only if this receiver's last scan
	// indexed it: one published since is left to Receive and Sweep, which
	// wait for it anyway. So a miss takes no lock even while head moves
	// for other keys (a busy edge: a stage's other requests).
	if _, indexed := r.ix.lookup(keys[0]); !indexed {
		return false, nil
	}
	if err := c.flock(r.m.fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if err == errBusy {
			c.busy.Add(1)
			return false, nil
		}
		return false, r.lockError(err)
	}
	defer c.flock(r.m.fd, unix.LOCK_UN)
	if err := r.scanLocked(c); err != nil {
		return true, err
	}
	checked := false
	for _, key := range keys {
		pos, indexed := r.ix.lookup(key)
		if !indexed {
			break
		}
		f, ready, err := r.readyLocked(key, pos)
		if err != nil {
			return true, err
		}
		if !ready {
			break
		}
		if !checked {
			// Once per run, before the first frame: a dead producer's
			// frames are never delivered (SPEC §7).
			checked = true
			if !r.alive(c) {
				r.dead.Store(true)
				return true, nil
			}
		}
		got, err := r.takeLocked(c, key, pos, f, decode)
		if errors.Is(err, ErrDeclined) {
			break // left ready, indexed
		}
		*out = append(*out, delivery{key, got, err})
		if err != nil {
			break
		}
	}
	return false, nil
}
