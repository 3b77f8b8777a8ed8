package ring

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/proc"
	"omnishm/scope"
)

// sweeper collects what Sweep delivers and counts want's questions.
type sweeper struct {
	wanted map[string]bool
	asked  []string
	got    map[string][]byte
	by     map[string]proc.ID
}

func newSweeper(keys ...string) *sweeper {
	s := &sweeper{wanted: map[string]bool{}, got: map[string][]byte{}, by: map[string]proc.ID{}}
	for _, k := range keys {
		s.wanted[k] = true
	}
	return s
}

func (s *sweeper) sweep(t *testing.T, tr *Transport, keys ...string) SweepStats {
	t.Helper()
	st, err := tr.Sweep("0", "1", keys, func(key string) bool {
		s.asked = append(s.asked, key)
		if s.wanted[key] {
			delete(s.wanted, key)
			return true
		}
		return false
	}, decodeCopy, func(key string, got Taken, err error) {
		if err != nil {
			t.Errorf("deliver %s: %v", key, err)
			return
		}
		if _, twice := s.got[key]; twice {
			t.Errorf("%s delivered twice", key)
		}
		s.got[key], s.by[key] = got.Value.([]byte), got.Producer
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// One sweep takes one lock per ring with new frames, claims exactly the
// wanted ones (each once, with its producer), leaves the others for Get,
// and costs nothing once nothing moved.
func TestSweepClaimsWantedFrames(t *testing.T) {
	_, prod, recv := pair(t, 1<<16)
	mustPut(t, prod, "0", "1", "first", shmtest.CodeBytes(9))
	mustMiss(t, recv, "0", "1", "attach", nil) // attach and scan the ring first
	for i := range 6 {
		mustPut(t, prod, "0", "1", "k"+strconv.Itoa(i), shmtest.CodeBytes(i))
	}
	s := newSweeper("k1", "k4")
	before := recv.work()
	st := s.sweep(t, recv)
	// Frames: the six and "first", which the attaching Get passed.
	if !st.Moved || st.Busy || st.Scans != 1 || st.Claims != 2 || st.Frames != 7 {
		t.Fatalf("stats %+v", st)
	}
	if w := recv.work(); w.flocks-before.flocks != 2 || w.liveness-before.liveness > 1 {
		t.Fatalf("one sweep took %d flock calls, %d liveness checks", w.flocks-before.flocks, w.liveness-before.liveness)
	}
	self, _ := proc.Self()
	for _, k := range []string{"k1", "k4"} {
		i, _ := strconv.Atoi(k[1:])
		if !slices.Equal(s.got[k], shmtest.CodeBytes(i)) || s.by[k] != self {
			t.Fatalf("%s: got %d bytes from %v", k, len(s.got[k]), s.by[k])
		}
		mustMiss(t, recv, "0", "1", k, nil)
	}
	// "first" too: the attaching Get indexed it, no sweep offered it yet.
	if !slices.Equal(s.asked, []string{"first", "k0", "k1", "k2", "k3", "k4", "k5"}) {
		t.Fatalf("want asked about %q", s.asked)
	}
	// Nothing new: no lock, no question.
	s.asked = nil
	before = recv.work()
	if st := s.sweep(t, recv); st.Moved || st.Scans != 0 || st.Claims != 0 || len(s.asked) != 0 || recv.work() != before {
		t.Fatalf("an idle sweep: %+v, asked %q, work %+v -> %+v", st, s.asked, before, recv.work())
	}
	// A key named in keys is found in the index without a new frame.
	s.wanted["k2"] = true
	if st := s.sweep(t, recv, "k2", "absent"); st.Moved || st.Scans != 1 || st.Claims != 1 || !slices.Equal(s.got["k2"], shmtest.CodeBytes(2)) {
		t.Fatalf("sweep for an indexed key: %+v", st)
	}
	if got := mustGet(t, recv, "0", "1", "k0", nil); !slices.Equal(got, shmtest.CodeBytes(0)) {
		t.Fatal("an unwanted frame was not left for Get")
	}
}

// A sweep that claims a batch allocates only the index's keys of the
// frames it scans: its deliveries go through a buffer it keeps, and no
// error list is made for rings that had none (the receive dispatcher
// sweeps after every wakeup; each allocation per delivery brings the next
// collection closer, and a collection scans every parked waiter's stack).
func TestSweepAllocatesOnlyKeys(t *testing.T) {
	_, prod, recv := pair(t, 1<<16)
	mustPut(t, prod, "0", "1", "first", shmtest.CodeBytes(1))
	mustMiss(t, recv, "0", "1", "attach", nil) // attach and scan the ring first
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	payload := shmtest.CodeBytes(3)
	write := func(dst []byte) error { copy(dst, payload); return nil }
	decode := func(Kind, []byte) (any, error) { return nil, nil }
	claims := 0
	a := testing.AllocsPerRun(100, func() {
		for _, k := range keys {
			if _, ok, _ := prod.Put("0", "1", k, KindBytes, len(payload), write); !ok {
				t.Fatal("refused")
			}
		}
		st, err := recv.Sweep("0", "1", nil, func(string) bool { return true }, decode, func(string, Taken, error) { claims++ })
		if err != nil || st.Claims < len(keys) {
			t.Fatalf("sweep: %+v, %v", st, err)
		}
	})
	if claims == 0 || a > float64(len(keys)) {
		t.Fatalf("%v allocations per sweep of %d frames (the index's keys: at most one each)", a, len(keys))
	}
}

// Frames that another caller's Get scanned (and indexed) since the last
// sweep are still new to the next one: nothing a waiter wants is stranded.
func TestSweepOffersFramesAGetScanned(t *testing.T) {
	_, prod, recv := pair(t, 1<<16)
	mustPut(t, prod, "0", "1", "first", shmtest.CodeBytes(9))
	s := newSweeper()
	s.sweep(t, recv) // attach; offers "first"
	mustPut(t, prod, "0", "1", "k", shmtest.CodeBytes(1))
	mustMiss(t, recv, "0", "1", "other", nil) // scans: the cursor passes k
	s.wanted["k"] = true
	if st := s.sweep(t, recv); !st.Moved || st.Claims != 1 || st.Frames != 1 || !slices.Equal(s.got["k"], shmtest.CodeBytes(1)) {
		t.Fatalf("sweep after a Get scanned the frame: %+v", st)
	}
	if st := s.sweep(t, recv); st.Moved || st.Scans != 0 || st.Frames != 0 {
		t.Fatalf("an idle sweep after that: %+v", st)
	}
}

// Get's receive, too, says who published what it returns.
func TestReceiveNamesTheProducer(t *testing.T) {
	_, prod, recv := pair(t, 1<<16)
	d := mustPut(t, prod, "0", "1", "k", shmtest.CodeBytes(1))
	self, _ := proc.Self()
	for _, desc := range []*descriptor.RingHandle{nil, &d} {
		mustPut(t, prod, "0", "1", "k", shmtest.CodeBytes(1))
		if desc != nil {
			d = mustPut(t, prod, "0", "1", "k", shmtest.CodeBytes(2))
		}
		got, ok, err := recv.Receive("0", "1", "k", desc, decodeCopy)
		if !ok || err != nil || got.Producer != self || got.Size != len(shmtest.CodeBytes(1)) {
			t.Fatalf("desc %v: %+v ok=%v err=%v", desc != nil, got, ok, err)
		}
	}
}

// A ring locked by another process is Busy, not waited for; its frames are
// swept once the lock is free.
func TestSweepBusyRing(t *testing.T) {
	_, prod, recv := pair(t, 1<<16)
	mustPut(t, prod, "0", "1", "first", shmtest.CodeBytes(9))
	mustMiss(t, recv, "0", "1", "attach", nil)
	d := mustPut(t, prod, "0", "1", "k", shmtest.CodeBytes(1))
	holder := shmtest.HoldLock(t, scope.Path(d.Name))
	s := newSweeper("k")
	if st := s.sweep(t, recv); !st.Busy || st.Claims != 0 {
		t.Fatalf("under another process's lock: %+v", st)
	}
	holder.Release(t)
	if st := s.sweep(t, recv); st.Busy || st.Claims != 1 {
		t.Fatalf("after the lock was released: %+v", st)
	}
}

// A producer in another process: Changes fires when its ring appears and
// when it dies, and a sweep then never delivers the dead producer's frames.
func TestChangesOnNewAndDeadProducer(t *testing.T) {
	sc, local, recv := pair(t, 4096)
	// A ring of this process makes the ring directory, so the watcher
	// follows it from the first miss on.
	mustPut(t, local, "0", "1", "local", shmtest.CodeBytes(1))
	mustMiss(t, recv, "0", "1", "attach", nil)
	child := shmtest.Start(t, "producer", sc, "k", "11")
	var d descriptor.RingHandle
	if err := json.Unmarshal([]byte(child.Line(t, shmtest.Patience)), &d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(scope.Path(d.Name))
		os.Remove(scope.New(sc).MarkerPath(d.Name))
		os.Remove(scope.New(sc).RingDir())
	})
	changed := func(what string) {
		t.Helper()
		select {
		case <-recv.Changes():
		case <-time.After(shmtest.Patience):
			t.Fatalf("no change for %s", what)
		}
	}
	changed("the new producer")
	s := newSweeper()
	if st := s.sweep(t, recv); st.Claims != 0 || !st.Moved || len(recv.readerFDs()) != 2 {
		t.Fatalf("sweep after the new producer: %+v, %d rings", st, len(recv.readerFDs()))
	}
	child.Kill()
	changed("the producer's death")
	s.wanted["k"] = true
	if st := s.sweep(t, recv, "k"); st.Claims != 0 || len(s.got) != 0 {
		t.Fatalf("a dead producer's frame was swept: %+v", st)
	}
	if len(recv.readerFDs()) != 1 {
		t.Fatal("the dead producer's ring is still attached")
	}
}

// TakeReady claims the run of keys that are ready, in order, under one
// lock pair and one liveness check, stops at the first missing key, and
// costs nothing when nothing moved.
func TestTakeReadyClaimsARun(t *testing.T) {
	sc, prod, recv := pair(t, 1<<16)
	mustPut(t, prod, "0", "1", "first", shmtest.CodeBytes(9))
	// A receiver that attached nothing yet: no discovery, no stat.
	fresh := newTransport(t, sc, 1<<16)
	if n, err := fresh.TakeReady("0", "1", []string{"first"}, decodeCopy, func(string, Taken, error) {}); n != 0 || err != nil || fresh.work() != (work{}) {
		t.Fatalf("TakeReady with nothing attached: %d, %v, work %+v", n, err, fresh.work())
	}
	mustMiss(t, recv, "0", "1", "attach", nil)
	for _, i := range []int{0, 1, 2, 4} { // 3 missing: the run ends there
		mustPut(t, prod, "0", "1", "c"+strconv.Itoa(i), shmtest.CodeBytes(i))
	}
	keys := []string{"c0", "c1", "c2", "c3", "c4"}
	// A run starts at a key the receiver's last scan indexed: none yet.
	before := recv.work()
	if n, err := recv.TakeReady("0", "1", keys, decodeCopy, func(string, Taken, error) {}); n != 0 || err != nil || recv.work() != before {
		t.Fatalf("TakeReady of a key never scanned: %d, %v; work %+v -> %+v", n, err, before, recv.work())
	}
	mustMiss(t, recv, "0", "1", "scan", nil) // indexes c0..c4
	take := func() []string {
		t.Helper()
		var got []string
		n, err := recv.TakeReady("0", "1", keys, decodeCopy, func(key string, tk Taken, err error) {
			i, _ := strconv.Atoi(key[1:])
			if err != nil || !slices.Equal(tk.Value.([]byte), shmtest.CodeBytes(i)) {
				t.Errorf("%s: %v", key, err)
			}
			got = append(got, key)
		})
		if err != nil || n != len(got) {
			t.Fatalf("TakeReady = %d, %v; delivered %q", n, err, got)
		}
		return got
	}
	before = recv.work()
	if got := take(); !slices.Equal(got, keys[:3]) {
		t.Fatalf("took %q", got)
	}
	if w := recv.work(); w.flocks-before.flocks != 2 || w.liveness-before.liveness > 1 {
		t.Fatalf("one run took %d flock calls, %d liveness checks", w.flocks-before.flocks, w.liveness-before.liveness)
	}
	before = recv.work()
	if got := take(); len(got) != 0 || recv.work() != before {
		t.Fatalf("nothing moved: took %q, work %+v -> %+v", got, before, recv.work())
	}
	keys = keys[3:]
	mustPut(t, prod, "0", "1", "c3", shmtest.CodeBytes(3))
	mustMiss(t, recv, "0", "1", "scan", nil)
	if got := take(); !slices.Equal(got, []string{"c3", "c4"}) {
		t.Fatalf("after the gap was filled: took %q", got)
	}
	mustMiss(t, recv, "0", "1", "c4", nil)
	if got := mustGet(t, recv, "0", "1", "first", nil); !slices.Equal(got, shmtest.CodeBytes(9)) {
		t.Fatal("a key not asked for was taken")
	}
}
