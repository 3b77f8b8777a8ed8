//go:build linux

package connector

import (
	"fmt"
	"testing"

	"omnishm/ring"
)

func ringDesc(name string, pos uint64) Descriptor {
	return Descriptor{HostRing: &RingHandle{Name: name, Position: pos, Size: 10}, Size: 10}
}

func segDesc(key string) Descriptor {
	return Descriptor{Shm: &ShmHandle{Name: key, Size: 10}, Size: 10}
}

// put runs one put through the ledger as SHM.Put does, an earlier
// per-key publication of the key taken as still waiting.
func (l *ledger) put(t *testing.T, key string, d Descriptor, pending func(string) bool) {
	t.Helper()
	prev, replacing, err := l.admit(key)
	if err != nil {
		t.Fatal(err)
	}
	l.settle(key, putTicket{prev: prev, replacing: replacing, prevPending: replacing}, d, true, pending)
}

// The ledger's memory stays bounded whoever asks nothing: a ring put
// keeps no record (the ring's index is the record), per-key records go
// once the segment producer no longer holds the key, retirements past
// maxRetired.
func TestLedgerIsBounded(t *testing.T) {
	var l ledger
	never := func(string) bool { return false }
	for i := range 10000 {
		l.put(t, fmt.Sprintf("r%d", i), ringDesc("ring", uint64(i*64)), never)
	}
	if n := len(l.live); n != 0 {
		t.Errorf("%d records of ring puts", n)
	}

	l = ledger{}
	held := map[string]bool{}
	pending := func(k string) bool { return held[k] }
	for i := range 10000 {
		k := fmt.Sprintf("s%d", i)
		held[k] = i%100 == 0 // one in a hundred stays unclaimed
		l.put(t, k, segDesc(k), pending)
	}
	// Unclaimed keys go round the sweep; the others leave it.
	if n := len(l.live); n > 250 {
		t.Errorf("%d per-key records for 100 unclaimed segments", n)
	}
	if n := l.segKeys.len(); n > 250 {
		t.Errorf("segment queue of %d", n)
	}

	l = ledger{}
	for i := range 3 * maxRetired {
		k := fmt.Sprintf("x%d", i)
		l.put(t, k, segDesc(k), never)
		l.retiredKey(k, true, byCleanup)
	}
	if len(l.retired) != maxRetired || l.order.len() != maxRetired {
		t.Errorf("%d retirements remembered (%d queued), want %d", len(l.retired), l.order.len(), maxRetired)
	}
	if f, _, decided, _ := l.known(pubID{name: fmt.Sprintf("x%d", 3*maxRetired-1), seg: true}); !decided || f != retired {
		t.Error("the newest retirement is forgotten")
	}
	if _, _, decided, _ := l.known(pubID{name: "x0", seg: true}); decided {
		t.Error("the oldest retirement is still remembered")
	}
}

// The ring's reports of the frames it retires become retirements with
// the connector's causes: a replacing put's, a cancel's (the cause its
// caller set), Close's; a ring put replacing a per-key publication drops
// its record.
func TestLedgerNotesRingRetirements(t *testing.T) {
	var l ledger
	never := func(string) bool { return false }
	h := func(pos uint64) RingHandle { return RingHandle{Name: "ring", Position: pos, Size: 10} }
	l.ringRetired(h(0), ring.RetiredByPut)
	l.cancelCause = byCleanup
	l.ringRetired(h(64), ring.RetiredByCancel)
	l.waitStart(pubID{name: "ring", pos: 128}, ringDesc("ring", 128))
	l.ringRetired(h(128), ring.RetiredByClose)
	l.ringRetired(h(192), ring.RetiredByClose) // nobody waits on it
	for pos, want := range map[uint64]cause{0: byReput, 64: byCleanup, 128: byClose} {
		if f, why, decided, _ := l.known(pubID{name: "ring", pos: pos}); !decided || f != retired || why != want {
			t.Errorf("frame at %d: %v %v %v, want retired %v", pos, f, why, decided, want)
		}
	}
	if _, _, decided, _ := l.known(pubID{name: "ring", pos: 192}); decided {
		t.Error("a frame the ring did not report reads as decided")
	}
	l.put(t, "k", segDesc("k"), never)
	l.put(t, "k", ringDesc("ring", 256), never)
	if _, ok := l.record("k"); ok {
		t.Error("a ring put left the key's per-key record")
	}
	if f, why, _, _ := l.known(pubID{name: "k", seg: true}); f != retired || why != byReput {
		t.Errorf("replaced segment: %v %v", f, why)
	}
}

// A retirement speaks of one publication: a ring frame retired stays so
// while the key's next frame waits; a new segment under a retired key
// waits again.
func TestLedgerRetirementIsPerPublication(t *testing.T) {
	var l ledger
	never := func(string) bool { return false }
	l.put(t, "k", ringDesc("ring", 0), never)
	l.put(t, "k", ringDesc("ring", 64), never)
	l.ringRetired(RingHandle{Name: "ring", Size: 10}, ring.RetiredByPut) // the second replaced the first
	if f, why, _, _ := l.known(pubID{name: "ring"}); f != retired || why != byReput {
		t.Fatalf("replaced frame: %v %v", f, why)
	}
	if _, _, decided, _ := l.known(pubID{name: "ring", pos: 64}); decided {
		t.Fatal("the new frame reads as decided")
	}

	held := func(string) bool { return true }
	l.put(t, "s", segDesc("s"), held)
	l.retiredKey("s", true, byCleanup)
	id := pubID{name: "s", seg: true}
	if f, _, _, _ := l.known(id); f != retired {
		t.Fatal("segment not retired")
	}
	l.put(t, "s", segDesc("s"), held)
	if _, _, decided, _ := l.known(id); decided {
		t.Fatal("a new segment under a retired key reads as retired")
	}
	// The old retirement, when it falls out of the queue, must not
	// forget a newer one of the same name.
	l.retiredKey("s", true, byCleanup)
	for i := range maxRetired - 1 {
		l.retire(pubID{name: fmt.Sprint(i), seg: true}, byCleanup)
	}
	if f, _, _, _ := l.known(id); f != retired {
		t.Fatal("the newer retirement of the name was forgotten with the older")
	}
}

func TestFifo(t *testing.T) {
	var q fifo[int]
	next := 0
	for i := range 1000 {
		q.push(i)
		if i%3 != 0 {
			if got := q.pop(); got != next {
				t.Fatalf("pop %d, want %d", got, next)
			}
			next++
		}
	}
	if q.len() != 1000-next || q.front() != next || q.at(q.len()-1) != 999 {
		t.Fatalf("len %d front %d", q.len(), q.front())
	}
	if cap(q.items) > 2048 {
		t.Fatalf("capacity %d for %d items", cap(q.items), q.len())
	}
}
