package ring

import (
	"errors"
	"slices"
	"testing"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// mustClaimed checks Claimed from the file and, the same, from the
// producer's own Transport p (its mapping, while the ring is open).
func mustClaimed(t *testing.T, p *Transport, d descriptor.RingHandle, want bool) {
	t.Helper()
	got, err := Claimed(d)
	if err != nil || got != want {
		t.Fatalf("Claimed(%+v) = %v, %v; want %v", d, got, err, want)
	}
	if got, err := p.Claimed(d); err != nil || got != want {
		t.Fatalf("the producer's Claimed(%+v) = %v, %v; want %v", d, got, err, want)
	}
}

// A receiver in another process claims the frame: Claimed turns true, and
// it never waits while another process holds the ring lock.
func TestClaimedByAnotherProcess(t *testing.T) {
	sc := shmtest.Scope(t)
	p := newTransport(t, sc, 4096)
	mustPut(t, p, "0", "1", "before", []byte{1}) // frames before and after the one watched
	d := mustPut(t, p, "0", "1", "watched", []byte{2, 3})
	mustPut(t, p, "0", "1", "after", []byte{4})
	mustClaimed(t, p, d, false)

	holder := shmtest.HoldLock(t, scope.ShmDir+"/"+d.Name)
	withoutWaiting(t, "Claimed", func() error {
		claimed, err := Claimed(d)
		if claimed {
			err = errors.New("claimed while nobody claimed it")
		}
		return err
	})
	holder.Release(t)

	child := shmtest.Start(t, "receiver", sc, "watched")
	child.Expect(t, shmtest.Patience, "ready")
	mustClaimed(t, p, d, false)
	child.Send(t, "go")
	child.Expect(t, shmtest.Patience, "got 0203")
	mustClaimed(t, p, d, true)
	child.Send(t, "stop")
	child.Expect(t, shmtest.Patience, "claims=1")
	child.Exited(t, shmtest.Patience)
}

// A frame retired by its producer, reclaimed, or in a ring that is gone is
// no longer waiting for anyone; a descriptor that names no frame is an
// error.
func TestClaimedRetiredReclaimedGone(t *testing.T) {
	_, p, r := pair(t, 4096)
	replaced := mustPut(t, p, "0", "1", "k", []byte{1})
	mustPut(t, p, "0", "1", "k", []byte{2})
	mustClaimed(t, p, replaced, true)
	mustGet(t, r, "0", "1", "k", nil) // so that tail can pass it below
	cancelled := mustPut(t, p, "0", "1", "cancelled", []byte{3})
	p.Cancel("cancelled")
	mustClaimed(t, p, cancelled, true)
	got := mustPut(t, p, "0", "1", "got", []byte{4})
	mustGet(t, r, "0", "1", "got", nil)
	for i := range 40 { // wrap: tail passes every frame above
		key := "fill" + string(rune('a'+i%26))
		mustPut(t, p, "0", "1", key, shmtest.CodeBytes(i))
		mustGet(t, r, "0", "1", key, nil)
	}
	mustClaimed(t, p, got, true)
	pending := mustPut(t, p, "0", "1", "pending", []byte{5})
	mustClaimed(t, p, pending, false)

	for name, d := range map[string]descriptor.RingHandle{
		"beyond head":  {Name: pending.Name, Position: pending.Position + 4096, Size: 1},
		"wrong size":   {Name: pending.Name, Position: pending.Position, Size: 7},
		"mid-frame":    {Name: pending.Name, Position: pending.Position + 16, Size: 1},
		"not a ring":   {Name: "../etc/passwd", Position: 0, Size: 1},
		"another user": {Name: "omni_shm_ring_v1_1_x", Position: 0, Size: 1},
	} {
		for _, claimed := range []func(descriptor.RingHandle) (bool, error){Claimed, p.Claimed} {
			if c, err := claimed(d); err == nil || c {
				t.Errorf("%s: Claimed = %v, %v; want an error", name, c, err)
			} else if !errors.Is(err, descriptor.ErrBad) && !errors.Is(err, ErrName) && !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: error %v wraps no sentinel", name, err)
			}
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	mustClaimed(t, p, pending, true)
}

// OnRetire hears of each frame the producer retires unclaimed, with the
// call that did it, and of no other: not of a claimed frame a later put or
// Close passes over. Unclaimed lists the frames that still wait.
func TestRetirementsReported(t *testing.T) {
	sc := shmtest.Scope(t)
	type note struct {
		h   descriptor.RingHandle
		why Retirement
	}
	var notes []note
	p, err := New(Options{Names: scope.New(sc), Capacity: 4096, OnRetire: func(h descriptor.RingHandle, why Retirement) {
		notes = append(notes, note{h, why})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := newTransport(t, sc, 4096)
	a := mustPut(t, p, "0", "1", "a", []byte{1})
	b := mustPut(t, p, "0", "1", "b", []byte{2, 2})
	a2 := mustPut(t, p, "0", "1", "a", []byte{3}) // replaces a
	mustGet(t, r, "0", "1", "b", nil)
	mustPut(t, p, "0", "1", "b", []byte{4}) // b was claimed: nothing retired
	c := mustPut(t, p, "0", "1", "c", []byte{5})
	if n := p.Cancel("a"); n != 1 {
		t.Fatalf("Cancel retired %d frames", n)
	}
	if got := p.Unclaimed(); len(got) != 2 || !slices.Contains(got, c) || slices.Contains(got, b) {
		t.Fatalf("Unclaimed = %+v, want b's second frame and %+v", got, c)
	}
	mustGet(t, r, "0", "1", "c", nil)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	want := []note{{a, RetiredByPut}, {a2, RetiredByCancel}}
	if len(notes) != 3 || !slices.Equal(notes[:2], want) || notes[2].why != RetiredByClose || notes[2].h.Size != 1 {
		t.Fatalf("retirements %+v, want %+v then b's second frame by Close", notes, want)
	}
	if got := p.Unclaimed(); got != nil {
		t.Errorf("a closed Transport lists %+v", got)
	}
}
