//go:build linux

package connector

import (
	"sync"

	"omnishm/keys"
)

// This file is the claims ledger: what a producer knows about the fate of
// its own publications, which shared memory alone cannot tell. SPEC §3
// gives a claimed frame and a retired one the same state byte, and a
// claimed segment and a retired one are both just gone, so the connector
// notes each publication when Put returns it and each retirement it makes
// (Cleanup, CleanupPrefix, a re-put, Close). Claimed, WaitClaimed and
// Shutdown read it.

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

// ringPut is one recorded frame of a ring, in the ring's put order.
type ringPut struct {
	pos uint64
	key string
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
	key     string // the publication's key, when the ledger knows it
	outcome fate   // claimed when Close found it claimed
}

// ledger is the claims ledger of one connector. Its zero value is empty
// and ready. Its memory is bounded: a ring record is dropped once its
// producer reclaimed the frame (forgetReclaimed, every reclaimCheck ring
// puts), or at the latest once the ring's puts have moved a capacity past
// it (the frame is reclaimed then); either way it was claimed, or retired
// and the retirement noted. A per-key one
// once the segment producer knows its segment consumed, and at most
// maxRetired retirements are remembered.
type ledger struct {
	// retireMu orders this connector's retirements against checks of
	// shared memory: a retirement and its noting hold it for writing, a
	// check for reading. So a check never finds a frame done, or a segment
	// gone, through a retirement that is not noted yet.
	retireMu sync.RWMutex

	mu           sync.Mutex
	live         map[string]record // key → its latest publication, fate unknown
	rings        map[string]*fifo[ringPut]
	lastRing     string // the ring of the last frame noted, and its log
	lastLog      *fifo[ringPut]
	segKeys      fifo[string] // keys of per-key records, for the sweep
	retired      map[pubID]retirement
	order        fifo[retirement]
	seq          uint64
	waits        map[pubID]*waiters
	sinceReclaim int  // ring puts settled since the last forgetReclaimed
	inflight     int  // puts admitted and not settled
	draining     bool // Shutdown began: refuse puts
	closed       bool
	changed      chan struct{} // closed when a fate may have changed; nil until someone waits
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

// reclaimCheck is how many ring puts go by between two looks at how far
// their producer reclaimed (forgetReclaimed): while receivers keep up, the
// ledger holds about that many ring records, not a ring's worth.
const reclaimCheck = 32

// settle ends an admitted put: it records the publication d made, and
// notes prev retired when the put replaced it unclaimed (prevPending).
// capacity is the ring's; stillPending tells whether the segment
// producer still holds a key unclaimed. reclaim says it is time to drop
// the records of frames the producer reclaimed (forgetReclaimed).
func (l *ledger) settle(key string, prev record, prevPending bool, d Descriptor, ok bool, capacity int, stillPending func(string) bool) (reclaim bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	if l.draining && l.inflight == 0 {
		l.wake()
	}
	if !ok || l.closed {
		return false
	}
	id := idOf(d) // Put's own
	if prevPending && prev.id != id {
		l.retire(prev.id, byReput)
	}
	if l.live == nil {
		l.live = map[string]record{}
	}
	if !id.seg {
		l.live[key] = record{id: id, size: d.Size}
		l.noteFrame(key, id, uint64(capacity))
		if l.sinceReclaim++; l.sinceReclaim >= reclaimCheck {
			l.sinceReclaim = 0
			return true
		}
		return false
	}
	// A new publication under the name: an old retirement of it no longer
	// speaks of what is there.
	delete(l.retired, id)
	l.sweepSegments(stillPending)
	if old, had := l.live[key]; !had || !old.id.seg {
		l.segKeys.push(key)
	}
	l.live[key] = record{id: id, size: d.Size}
	return false
}

// noteFrame appends a ring frame to its ring's log and drops the records
// of frames a capacity behind it: the producer reclaimed those before it
// could place this one.
func (l *ledger) noteFrame(key string, id pubID, capacity uint64) {
	log := l.lastLog
	if log == nil || l.lastRing != id.name {
		// Most puts go to the ring of the previous one: no map lookup.
		if l.rings == nil {
			l.rings = map[string]*fifo[ringPut]{}
		}
		if log = l.rings[id.name]; log == nil {
			log = &fifo[ringPut]{}
			l.rings[id.name] = log
		}
		l.lastRing, l.lastLog = id.name, log
	}
	log.push(ringPut{pos: id.pos, key: key})
	l.forgetFrames(id.name, log, id.pos-min(id.pos, capacity-1))
}

// forgetReclaimed drops the records of ring's frames before tail, which
// its producer reclaimed: they were claimed, or retired and noted so.
func (l *ledger) forgetReclaimed(ring string, tail uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if log := l.rings[ring]; log != nil {
		l.forgetFrames(ring, log, tail)
	}
}

// forgetFrames pops ring's log up to position end (excluded), dropping
// the records of the frames it names; l.mu is held.
func (l *ledger) forgetFrames(ring string, log *fifo[ringPut], end uint64) {
	for log.len() > 0 && log.front().pos < end {
		e := log.pop()
		if r, ok := l.live[e.key]; ok && r.id == (pubID{name: ring, pos: e.pos}) {
			delete(l.live, e.key)
		}
	}
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
		r, ok := l.live[k]
		switch {
		case !ok || !r.id.seg: // stale: forgotten, or now a ring record
		case stillPending(k):
			l.segKeys.push(k)
		default:
			delete(l.live, k)
		}
	}
}

// retiredKey notes what a retirement of key did: frames ring frames and,
// with seg, the key's segment, retired by this connector. It drops key's
// record: either that publication was retired now (reported), or it had
// been claimed.
func (l *ledger) retiredKey(key string, frames int, seg bool, why cause) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.live[key]
	if !ok {
		return false
	}
	delete(l.live, key)
	if (r.id.seg && seg) || (!r.id.seg && frames > 0) {
		l.retire(r.id, why)
		return true
	}
	return false
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

// observedClaimed drops the record of a publication seen claimed. A ring
// record stays until its ring moves past it: a frame names no key.
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
		w = &waiters{d: d, key: l.keyOf(id)}
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

// keyOf finds the key of a recorded publication; l.mu is held.
func (l *ledger) keyOf(id pubID) string {
	if id.seg {
		return id.name
	}
	if log := l.rings[id.name]; log != nil {
		for i := log.len() - 1; i >= 0; i-- {
			if e := log.at(i); e.pos == id.pos {
				return e.key
			}
		}
	}
	return ""
}

// keysWithPrefix lists the recorded keys that are prefix followed by
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
	l.live, l.rings, l.lastLog, l.segKeys = nil, nil, nil, fifo[string]{}
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
// none is left, the records to wait for.
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
