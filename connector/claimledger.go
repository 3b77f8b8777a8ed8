//go:build linux

package connector

import (
	"sync"

	"omnishm/keys"
	"omnishm/ring"
)

// This file is the claims ledger: what a producer knows about the fate of
// its own publications, which shared memory alone cannot tell. SPEC §3
// gives a claimed frame and a retired one the same state byte, and a
// claimed segment and a retired one are both just gone, so the connector
// notes each publication when Put returns it and each retirement it makes
// (Cleanup, CleanupPrefix, a re-put, Close). Claimed, WaitClaimed and
// Shutdown read it. The ring tells it of each frame the ring retires
// (ring.Options.OnRetire) as it happens; its own producer index is the
// record of the frames that wait, so the ledger keeps no ring records, and
// a ring put touches no map of its.

// fate is what became of a publication, as far as its producer knows.
type fate uint8

const (
	pending fate = iota // it still waits for a receiver
	claimed             // a receiver took it
	retired             // this connector retired it
)

// maxRetired bounds the retirements the ledger remembers. Past it the
// oldest is forgotten; its publication then reads as claimed, as one this
// connector never put does.
const maxRetired = 4096

// segSweep is how many per-key records each per-key put checks, round
// robin, for segments the segment producer knows consumed: more than the
// one it adds, so the records of a producer nobody asks about stay about
// as many as its unclaimed segments.
const segSweep = 2

// pubID names one publication: a ring frame by its ring and position
// (positions never repeat), a per-key segment by its key (SPEC §6 gives
// segments no generation: a re-put of the key is the same name).
type pubID struct {
	name string // ring file name, or the segment's key
	pos  uint64 // ring position; 0 for a segment
	seg  bool
}

// pubOf is the identity of the publication d names; the error wraps
// ErrBadDescriptor.
func pubOf(d Descriptor) (pubID, error) {
	if err := d.Validate(); err != nil {
		return pubID{}, err
	}
	return idOf(d), nil
}

// idOf is pubOf for a descriptor known valid: one Put just made.
func idOf(d Descriptor) pubID {
	if d.HostRing != nil {
		return pubID{name: d.HostRing.Name, pos: d.HostRing.Position}
	}
	return pubID{name: d.Shm.Name, seg: true}
}

// record is a publication in the ledger: enough to rebuild its descriptor.
type record struct {
	id   pubID
	size int
}

func (r record) descriptor() Descriptor {
	if r.id.seg {
		return Descriptor{Shm: &ShmHandle{Name: r.id.name, Size: r.size}, Size: r.size}
	}
	return Descriptor{HostRing: &RingHandle{Name: r.id.name, Position: r.id.pos, Size: r.size}, Size: r.size}
}

// cause is what retired a publication, said in the error.
type cause uint8

const (
	byCleanup cause = iota + 1
	byReput
	byClose
)

func (c cause) String() string {
	switch c {
	case byCleanup:
		return "by Cleanup or CleanupPrefix"
	case byReput:
		return "replaced by a later put of its key"
	case byClose:
		return "by Close"
	}
	return "by its producer"
}

// retirement is one remembered retirement, in the order they were made.
type retirement struct {
	id    pubID
	seq   uint64
	cause cause
}

// waiters are the WaitClaimed calls on one publication.
type waiters struct {
	n       int
	d       Descriptor
	outcome fate // claimed when Close found it claimed
}

// ledger is the claims ledger of one connector. Its zero value is empty
// and ready. Its memory is bounded: it holds per-key records only, each
// until the segment producer knows its segment consumed, and at most
// maxRetired retirements.
type ledger struct {
	// retireMu orders this connector's per-key retirements against checks
	// of shared memory: a retirement and its noting hold it for writing, a
	// check for reading. So a check never finds a segment gone through a
	// retirement that is not noted yet. A ring frame's retirement needs
	// none of it: the ring notes it before its producer's mutex lets a
	// check see the frame done, and a check that finds a frame done looks
	// at the ledger again (SHM.fate).
	retireMu sync.RWMutex

	// cancelMu holds cancelCause for one ring cancel at a time: the cause
	// its OnRetire calls note (ringRetired).
	cancelMu    sync.Mutex
	cancelCause cause

	mu       sync.Mutex
	live     map[string]record // key → its latest per-key publication, fate unknown
	segKeys  fifo[string]      // keys of per-key records, for the sweep
	retired  map[pubID]retirement
	order    fifo[retirement]
	seq      uint64
	waits    map[pubID]*waiters
	inflight int  // puts admitted and not settled
	draining bool // Shutdown began: refuse puts
	closed   bool
	changed  chan struct{} // closed when a fate may have changed; nil until someone waits
}

// admit lets a put begin unless the connector is shutting down or closed,
// and returns key's earlier record, if the ledger holds one.
func (l *ledger) admit(key string) (prev record, replacing bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.draining || l.closed {
		return record{}, false, ErrClosed
	}
	l.inflight++
	prev, replacing = l.live[key]
	return prev, replacing, nil
}

// settle ends an admitted put: it records the per-key publication d made
// (a ring frame needs no record: see ledger), drops the key's earlier
// per-key record once a ring frame replaced it, and notes that record
// retired when the put replaced it unclaimed (t.prevPending).
// stillPending tells whether the segment producer still holds a key
// unclaimed.
func (l *ledger) settle(key string, t putTicket, d Descriptor, ok bool, stillPending func(string) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	if l.draining && l.inflight == 0 {
		l.wake()
	}
	if !ok || l.closed {
		return
	}
	id := idOf(d) // Put's own
	if t.prevPending && t.prev.id != id {
		l.retire(t.prev.id, byReput)
	}
	if !id.seg {
		if t.replacing {
			delete(l.live, key)
		}
		return
	}
	// A new publication under the name: an old retirement of it no longer
	// speaks of what is there.
	delete(l.retired, id)
	l.sweepSegments(stillPending)
	if _, had := l.live[key]; !had {
		l.segKeys.push(key)
	}
	if l.live == nil {
		l.live = map[string]record{}
	}
	l.live[key] = record{id: id, size: d.Size}
}

// ringRetired notes a frame the ring retired unclaimed (its OnRetire): a
// replacing put's, a cancel's, whose cause the cancel holds in
// cancelCause, or Close's, of which only a frame someone waits on is
// noted (after Close the ledger tells only those fates, as for segments).
func (l *ledger) ringRetired(h RingHandle, why ring.Retirement) {
	c := byClose
	switch why {
	case ring.RetiredByPut:
		c = byReput
	case ring.RetiredByCancel:
		c = l.cancelCause // cancelMu is held by the cancel that calls this
	}
	id := pubID{name: h.Name, pos: h.Position}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c == byClose && l.waits[id] == nil {
		return
	}
	l.retire(id, c)
}

// sweepSegments forgets up to segSweep per-key records whose segment the
// segment producer no longer holds unclaimed (consumed: a retirement by
// this connector drops its record when it is made).
func (l *ledger) sweepSegments(stillPending func(string) bool) {
	for range segSweep {
		if l.segKeys.len() == 0 {
			return
		}
		k := l.segKeys.pop()
		_, ok := l.live[k]
		switch {
		case !ok: // stale: forgotten
		case stillPending(k):
			l.segKeys.push(k)
		default:
			delete(l.live, k)
		}
	}
}

// retiredKey notes what a retirement of key did to its per-key
// publication: with seg, this connector retired the key's segment. It
// drops key's record: either that publication was retired now (reported),
// or it had been claimed. (The ring noted its own frames: ringRetired.)
func (l *ledger) retiredKey(key string, seg bool, why cause) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.live[key]
	if !ok {
		return false
	}
	delete(l.live, key)
	if seg {
		l.retire(r.id, why)
	}
	return seg
}

// retire remembers id as retired; l.mu is held.
func (l *ledger) retire(id pubID, why cause) {
	if l.retired == nil {
		l.retired = map[pubID]retirement{}
	}
	l.seq++
	r := retirement{id, l.seq, why}
	l.retired[id] = r
	l.order.push(r)
	for l.order.len() > maxRetired {
		old := l.order.pop()
		if l.retired[old.id].seq == old.seq {
			delete(l.retired, old.id)
		}
	}
	l.wake()
}

// wake tells the waiters that a fate may have changed; l.mu is held.
func (l *ledger) wake() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// changes returns a channel that is closed at the next change of a fate
// the ledger notes (a retirement, Close, the last put Shutdown waits for).
func (l *ledger) changes() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// known returns id's fate when the ledger alone can tell it (decided): a
// retirement it remembers, and after Close what Close found for a waited
// publication. closed reports that the connector is closed: an undecided
// fate then stays unknown.
func (l *ledger) known(id pubID) (f fate, why cause, decided, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.retired[id]; ok {
		return retired, r.cause, true, l.closed
	}
	if l.closed {
		if w := l.waits[id]; w != nil && w.outcome == claimed {
			return claimed, 0, true, true
		}
		return pending, 0, false, true
	}
	return pending, 0, false, false
}

// observedClaimed drops the record of a per-key publication seen claimed.
func (l *ledger) observedClaimed(id pubID) {
	if !id.seg {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.live[id.name]; ok && r.id == id {
		delete(l.live, id.name)
	}
}

// waitStart registers a WaitClaimed on id; waitEnd ends it.
func (l *ledger) waitStart(id pubID, d Descriptor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waits == nil {
		l.waits = map[pubID]*waiters{}
	}
	w := l.waits[id]
	if w == nil {
		w = &waiters{d: d}
		l.waits[id] = w
	}
	w.n++
}

func (l *ledger) waitEnd(id pubID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.waits[id]; w != nil {
		if w.n--; w.n == 0 {
			delete(l.waits, id)
		}
	}
}

// keysWithPrefix lists the keys of per-key records that are prefix followed by
// decimal digits only (SPEC §9).
func (l *ledger) keysWithPrefix(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k := range l.live {
		if keys.InPrefix(prefix, k) {
			out = append(out, k)
		}
	}
	return out
}

// waited lists the publications someone waits on.
func (l *ledger) waited() map[pubID]waiters {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[pubID]waiters, len(l.waits))
	for id, w := range l.waits {
		out[id] = *w
	}
	return out
}

// record returns key's record, if the ledger holds one.
func (l *ledger) record(key string) (record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.live[key]
	return r, ok
}

// close marks the ledger closed, with the waited publications Close found
// claimed (those it retired were noted as retirements), and wakes every
// waiter. It forgets the records: after Close only waiters learn a fate.
func (l *ledger) close(found []pubID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, id := range found {
		if w := l.waits[id]; w != nil {
			w.outcome = claimed
		}
	}
	l.live, l.segKeys = nil, fifo[string]{}
	l.wake()
}

func (l *ledger) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// drain refuses every put from now on (Shutdown); it reports whether the
// ledger was closed already.
func (l *ledger) drain() (closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.draining = true
	return l.closed
}

// unsettled reports how many admitted puts have not settled yet and, once
// none is left, the per-key records to wait for.
func (l *ledger) unsettled() (int, []record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight > 0 {
		return l.inflight, nil
	}
	out := make([]record, 0, len(l.live))
	for _, r := range l.live {
		out = append(out, r)
	}
	return 0, out
}

// fifo is a queue on a slice: push at the back, pop at the front, in
// amortised constant time. The zero fifo is empty.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int   { return len(q.items) - q.head }
func (q *fifo[T]) front() T   { return q.items[q.head] }
func (q *fifo[T]) at(i int) T { return q.items[q.head+i] }
func (q *fifo[T]) push(v T)   { q.items = append(q.items, v) }
func (q *fifo[T]) pop() (v T) {
	v = q.items[q.head]
	var zero T
	q.items[q.head] = zero // let go of what it references
	q.head++
	if q.head >= 64 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return v
}
