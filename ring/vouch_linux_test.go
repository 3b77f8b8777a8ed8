package ring

import (
	"os"
	"testing"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// roleKeys: args scope, keys. Puts each key on edge 0->1 (its value is the
// key), says "ready", then waits to be killed or for the parent to go.
func roleKeys(args []string) int {
	tr, err := New(Options{Names: scope.New(args[0]), Capacity: 4096})
	if err != nil {
		return 1
	}
	for _, k := range args[1:] {
		if _, ok, err := putBytes(tr, "0", "1", k, []byte(k)); !ok || err != nil {
			return 1
		}
	}
	shmtest.Say("ready")
	shmtest.Hear()
	return 0
}

// startKeys starts a producer process that puts keys, and attaches this
// receiver to its ring without claiming any.
func startKeys(t *testing.T, r *Transport, sc string, keys ...string) *shmtest.Proc {
	t.Helper()
	child := shmtest.Start(t, "keys", append([]string{sc}, keys...)...)
	if line := child.Line(t, shmtest.Patience); line != "ready" {
		t.Fatalf("producer: %q", line)
	}
	t.Cleanup(func() { // the ring a killed producer leaves, if discovery did not prune it
		for name := range r.readerFDs() {
			os.Remove(scope.ShmDir + "/" + name)
			os.Remove(scope.New(sc).RingDir() + "/" + name)
		}
		os.Remove(scope.New(sc).RingDir())
	})
	mustMiss(t, r, "0", "1", "not-published", nil)
	if len(r.readerFDs()) != 1 {
		t.Fatal("ring not attached")
	}
	return child
}

func receiveVouched(t *testing.T, r *Transport, key string, v *Vouch) ([]byte, bool) {
	t.Helper()
	got, ok, err := r.ReceiveVouched("0", "1", key, decodeCopy, v)
	if err != nil {
		t.Fatalf("receive %s: %v", key, err)
	}
	if !ok {
		return nil, false
	}
	return got.Value.([]byte), true
}

// A claim given a Vouch of its producer makes no liveness check of its own;
// one without makes it, and a Vouch of another edge or a zero one covers
// nothing.
func TestVouchSkipsTheClaimsLivenessCheck(t *testing.T) {
	sc := shmtest.Scope(t)
	r := newTransport(t, sc, 4096)
	startKeys(t, r, sc, "a", "b", "c")

	var v Vouch
	before := r.work()
	r.Vouch("0", "1", &v)
	if n := r.work().liveness - before.liveness; n != 1 || v.n != 1 {
		t.Fatalf("Vouch: %d liveness checks, vouches for %d rings; want 1 and 1", n, v.n)
	}
	before = r.work()
	if got, ok := receiveVouched(t, r, "a", &v); !ok || string(got) != "a" {
		t.Fatalf("a: got %q ok=%v", got, ok)
	}
	if w := r.work(); w.liveness != before.liveness || w.flocks-before.flocks != 2 {
		t.Fatalf("vouched claim: %d liveness checks, %d flock calls; want 0 and 2",
			w.liveness-before.liveness, w.flocks-before.flocks)
	}

	var other Vouch
	r.Vouch("0", "2", &other)
	for key, v := range map[string]*Vouch{"b": &other, "c": {}} {
		before = r.work()
		if got, ok := receiveVouched(t, r, key, v); !ok || string(got) != key {
			t.Fatalf("%s: got %q ok=%v", key, got, ok)
		}
		if n := r.work().liveness - before.liveness; n != 1 {
			t.Fatalf("%s, not vouched for: %d liveness checks, want 1", key, n)
		}
	}
}

// A Vouch made after its producer died vouches for nothing, and the claim
// then checks for itself: the dead producer's frame is not delivered.
func TestVouchOfADeadProducer(t *testing.T) {
	sc := shmtest.Scope(t)
	r := newTransport(t, sc, 4096)
	child := startKeys(t, r, sc, "a")
	child.Kill() // returns once the child is reaped
	var v Vouch
	r.Vouch("0", "1", &v)
	if v.n != 0 {
		t.Fatalf("a Vouch of a dead producer covers %d rings", v.n)
	}
	if got, ok := receiveVouched(t, r, "a", &v); ok {
		t.Fatalf("delivered %q from a dead producer", got)
	}
	if n := len(r.readerFDs()); n != 0 {
		t.Fatalf("%d rings still attached", n)
	}
}
