//go:build linux

package connector

import (
	"fmt"
	"testing"
)

func ringDesc(name string, pos uint64) Descriptor {
	return Descriptor{HostRing: &RingHandle{Name: name, Position: pos, Size: 10}, Size: 10}
}

func segDesc(key string) Descriptor {
	return Descriptor{Shm: &ShmHandle{Name: key, Size: 10}, Size: 10}
}

// put runs one put through the ledger as SHM.Put does.
func (l *ledger) put(t *testing.T, key string, d Descriptor, capacity int, pending func(string) bool) {
	t.Helper()
	prev, replacing, err := l.admit(key)
	if err != nil {
		t.Fatal(err)
	}
	l.settle(key, prev, replacing, d, true, capacity, pending)
}

// The ledger's memory stays bounded whoever asks nothing: ring records
// fall off a capacity behind the ring's newest put, per-key records once
// the segment producer no longer holds the key, retirements past
// maxRetired.
func TestLedgerIsBounded(t *testing.T) {
	var l ledger
	const capacity, frame = 4096, 64
	never := func(string) bool { return false }
	for i := range 10000 {
		l.put(t, fmt.Sprintf("r%d", i), ringDesc("ring", uint64(i*frame)), capacity, never)
	}
	if n, max := len(l.live), capacity/frame+1; n > max {
		t.Errorf("%d ring records for a ring of %d frames", n, max)
	}
	if n := l.rings["ring"].len(); n > capacity/frame+1 {
		t.Errorf("ring log of %d entries", n)
	}

	l = ledger{}
	held := map[string]bool{}
	pending := func(k string) bool { return held[k] }
	for i := range 10000 {
		k := fmt.Sprintf("s%d", i)
		held[k] = i%100 == 0 // one in a hundred stays unclaimed
		l.put(t, k, segDesc(k), 0, pending)
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
		l.put(t, k, segDesc(k), 0, never)
		l.retiredKey(k, 0, true, byCleanup)
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

// A ring whose receivers keep up keeps few records: every reclaimCheck
// puts settle asks for the producer's tail, and forgetReclaimed drops the
// records of the frames before it, no others.
func TestLedgerForgetsReclaimedFrames(t *testing.T) {
	var l ledger
	const capacity, frame = 1 << 20, 64
	never := func(string) bool { return false }
	due := 0
	for i := range 4 * reclaimCheck {
		prev, replacing, _ := l.admit(fmt.Sprint(i))
		if l.settle(fmt.Sprint(i), prev, replacing, ringDesc("ring", uint64(i*frame)), true, capacity, never) {
			due++
			l.forgetReclaimed("ring", uint64(i*frame)) // all but this one reclaimed
		}
	}
	if due != 4 {
		t.Errorf("settle asked for the tail %d times in %d puts, want 4", due, 4*reclaimCheck)
	}
	if n := len(l.live); n != 1 {
		t.Errorf("%d ring records with every frame but the last reclaimed, want 1", n)
	}
	if _, ok := l.record(fmt.Sprint(4*reclaimCheck - 1)); !ok {
		t.Error("the frame at the tail lost its record")
	}
	l.forgetReclaimed("other", 1<<40) // another ring's tail forgets nothing here
	if n := len(l.live); n != 1 {
		t.Errorf("%d records after another ring's tail, want 1", n)
	}
}

// A retirement speaks of one publication: a ring frame retired stays so
// while the key's next frame waits; a new segment under a retired key
// waits again.
func TestLedgerRetirementIsPerPublication(t *testing.T) {
	var l ledger
	never := func(string) bool { return false }
	l.put(t, "k", ringDesc("ring", 0), 4096, never)
	l.put(t, "k", ringDesc("ring", 64), 4096, never) // replaced it unclaimed
	if f, why, _, _ := l.known(pubID{name: "ring"}); f != retired || why != byReput {
		t.Fatalf("replaced frame: %v %v", f, why)
	}
	if _, _, decided, _ := l.known(pubID{name: "ring", pos: 64}); decided {
		t.Fatal("the new frame reads as decided")
	}

	held := func(string) bool { return true }
	l.put(t, "s", segDesc("s"), 0, held)
	l.retiredKey("s", 0, true, byCleanup)
	id := pubID{name: "s", seg: true}
	if f, _, _, _ := l.known(id); f != retired {
		t.Fatal("segment not retired")
	}
	l.put(t, "s", segDesc("s"), 0, held)
	if _, _, decided, _ := l.known(id); decided {
		t.Fatal("a new segment under a retired key reads as retired")
	}
	// The old retirement, when it falls out of the queue, must not
	// forget a newer one of the same name.
	l.retiredKey("s", 0, true, byCleanup)
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
