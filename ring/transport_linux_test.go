package ring

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/scope"
)

func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{
		"producer": roleProducer,
		"receiver": roleReceiver,
		"echoer":   roleEchoer,
		"keys":     roleKeys,
	})
}

func scopeNames(sc string) scope.Names { return scope.New(sc) }

func newTransport(t testing.TB, sc string, capacity int) *Transport {
	t.Helper()
	tr, err := New(Options{Names: scope.New(sc), Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func putBytes(tr *Transport, from, to, key string, payload []byte) (descriptor.RingHandle, bool, error) {
	return tr.Put(from, to, key, KindBytes, len(payload), func(dst []byte) error { copy(dst, payload); return nil })
}

func decodeCopy(kind Kind, payload []byte) (any, error) { return bytes.Clone(payload), nil }

func getBytes(tr *Transport, from, to, key string, desc *descriptor.RingHandle) ([]byte, bool, error) {
	v, size, ok, err := tr.Get(from, to, key, desc, decodeCopy)
	if !ok || err != nil {
		return nil, ok, err
	}
	b := v.([]byte)
	if size != len(b) {
		return nil, false, fmt.Errorf("size %d for %d bytes", size, len(b))
	}
	return b, true, nil
}

func mustGet(t testing.TB, tr *Transport, from, to, key string, desc *descriptor.RingHandle) []byte {
	t.Helper()
	b, ok, err := getBytes(tr, from, to, key, desc)
	if err != nil || !ok {
		t.Fatalf("get %s: ok=%v err=%v", key, ok, err)
	}
	return b
}

func mustMiss(t testing.TB, tr *Transport, from, to, key string, desc *descriptor.RingHandle) {
	t.Helper()
	if b, ok, err := getBytes(tr, from, to, key, desc); ok || err != nil {
		t.Fatalf("get %s: want a miss, got %q ok=%v err=%v", key, b, ok, err)
	}
}

func mustPut(t testing.TB, tr *Transport, from, to, key string, payload []byte) descriptor.RingHandle {
	t.Helper()
	d, ok, err := putBytes(tr, from, to, key, payload)
	if err != nil || !ok {
		t.Fatalf("put %s: ok=%v err=%v", key, ok, err)
	}
	return d
}

// pair is a producer and a receiver Transport in this process, on one scope.
func pair(t testing.TB, capacity int) (sc string, producer, receiver *Transport) {
	sc = shmtest.Scope(t)
	return sc, newTransport(t, sc, capacity), newTransport(t, sc, capacity)
}

func TestNewRejectsCapacity(t *testing.T) {
	for _, c := range []struct {
		capacity int
		want     int
		err      bool
	}{{0, 0, false}, {4096, 4096, false}, {4097, 4112, false}, {64 << 20, 64 << 20, false},
		{4095, 0, true}, {64<<20 + 1, 0, true}, {-1, 0, true}} {
		tr, err := New(Options{Names: scope.New("x"), Capacity: c.capacity})
		if c.err {
			if !errors.Is(err, ErrCapacity) {
				t.Errorf("capacity %d: err %v, want ErrCapacity", c.capacity, err)
			}
			continue
		}
		if err != nil || tr.Capacity() != c.want {
			t.Errorf("capacity %d: %v, %v", c.capacity, tr, err)
			continue
		}
		tr.Close()
	}
}

// Each get lags one put behind, so the ring is never empty at a put (an
// empty ring rewinds, see TestEmptyRingRewinds): frames walk the buffer and
// wrap after a padding frame.
func TestWraparoundKeepsValues(t *testing.T) {
	_, p, r := pair(t, 4096)
	var last uint64
	var descs []descriptor.RingHandle
	for i := range 100 {
		d := mustPut(t, p, "0", "1", fmt.Sprintf("wrap%d", i), shmtest.CodeBytes(i))
		if i > 0 && d.Position <= last {
			t.Fatalf("position %d after %d", d.Position, last)
		}
		if i > 0 && d.Position-last > uint64(len(shmtest.CodeBytes(i))+64) && d.Position%4096 != 0 {
			t.Fatalf("frame %d at %d, %d after the last: a skip that is no wrap", i, d.Position, d.Position-last)
		}
		last = d.Position
		descs = append(descs, d)
		if i == 0 {
			continue
		}
		var desc *descriptor.RingHandle
		if i%2 == 0 {
			desc = &descs[i-1]
		}
		if got := mustGet(t, r, "0", "1", fmt.Sprintf("wrap%d", i-1), desc); !bytes.Equal(got, shmtest.CodeBytes(i-1)) {
			t.Fatalf("wrap%d: wrong value", i-1)
		}
	}
	if last < 4*4096 {
		t.Fatalf("no wraparound: last position %d", last)
	}
}

// A put into an empty ring goes to the start of its buffer, after a padding
// frame that the put reclaims at once: one message in flight reuses the
// same, cached memory. A ring with a ready frame is not rewound.
func TestEmptyRingRewinds(t *testing.T) {
	const capacity = 4096
	_, p, r := pair(t, capacity)
	first := mustPut(t, p, "0", "1", "rw0", shmtest.CodeBytes(0))
	mustGet(t, r, "0", "1", "rw0", &first)
	d := mustPut(t, p, "0", "1", "rw1", shmtest.CodeBytes(1))
	if d.Position != capacity {
		t.Fatalf("put into the empty ring at %d, want %d (the buffer's start)", d.Position, capacity)
	}
	total := frameTotal(3, len(shmtest.CodeBytes(1)))
	m := p.producers[edgeKey{"0", "1"}].m
	if head, tail := m.head(), m.tail(); head != capacity+total || tail != capacity {
		t.Fatalf("head %d, tail %d: want %d, %d (the padding reclaimed)", head, tail, capacity+total, capacity)
	}
	next := mustPut(t, p, "0", "1", "rw2", shmtest.CodeBytes(2)) // rw1 still ready
	if next.Position != d.Position+total {
		t.Fatalf("put beside a ready frame at %d, want right after it", next.Position)
	}
	for i, desc := range []descriptor.RingHandle{d, next} {
		if got := mustGet(t, r, "0", "1", fmt.Sprintf("rw%d", i+1), &desc); !bytes.Equal(got, shmtest.CodeBytes(i+1)) {
			t.Fatalf("rw%d: wrong value", i+1)
		}
	}
}

func TestFullRingFallsBackAndRecovers(t *testing.T) {
	_, p, r := pair(t, 4096)
	var refused []int
	for i := range 12 {
		_, ok, err := putBytes(p, "0", "1", fmt.Sprintf("full%d", i), shmtest.CodeBytes(i))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			refused = append(refused, i)
		}
	}
	if len(refused) == 0 || refused[0] == 0 {
		t.Fatalf("refused %v: want a full ring after some puts", refused)
	}
	for i := 11; i >= 0; i-- {
		_, ok, err := getBytes(r, "0", "1", fmt.Sprintf("full%d", i), nil)
		if err != nil || ok == (i >= refused[0]) {
			t.Fatalf("full%d: ok=%v err=%v (refused from %d)", i, ok, err, refused[0])
		}
	}
	mustPut(t, p, "0", "1", "recovered", shmtest.CodeBytes(1))
	mustGet(t, r, "0", "1", "recovered", nil)
}

func TestLargeFramesRefused(t *testing.T) {
	_, p, _ := pair(t, 4096)
	key := "large"
	limit := p.MaxPayload(key)
	if limit != 4096/4-16-len(key) {
		t.Fatalf("MaxPayload = %d", limit)
	}
	if _, ok, _ := putBytes(p, "0", "1", key, make([]byte, limit+1)); ok {
		t.Fatal("frame over capacity/4 accepted")
	}
	if _, ok, _ := putBytes(p, "0", "1", key, make([]byte, limit)); !ok {
		t.Fatal("frame of exactly capacity/4 refused")
	}
	for _, c := range []struct{ from, to, key string }{{"a", "1", "k"}, {"0", "", "k"}, {"0", "1", strings.Repeat("k", 70000)}} {
		if _, ok, err := putBytes(p, c.from, c.to, c.key, nil); ok || err != nil {
			t.Errorf("put %q->%q key len %d: ok=%v err=%v", c.from, c.to, len(c.key), ok, err)
		}
	}
	off, err := New(Options{Names: scope.New("off"), Capacity: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if _, ok, err := putBytes(off, "0", "1", "k", []byte("x")); ok || err != nil || off.MaxPayload("k") != 0 {
		t.Fatalf("disabled ring: ok=%v err=%v", ok, err)
	}
}

func TestReplaceRetiresOldAndStaleDescriptorMisses(t *testing.T) {
	_, p, r := pair(t, 4096)
	old := mustPut(t, p, "0", "1", "reuse", []byte("11"))
	cur := mustPut(t, p, "0", "1", "reuse", []byte("22"))
	mustMiss(t, r, "0", "1", "reuse", &old)
	if got := mustGet(t, r, "0", "1", "reuse", &cur); string(got) != "22" {
		t.Fatalf("got %q", got)
	}
	mustPut(t, p, "0", "1", "reuse", []byte("33"))
	mustPut(t, p, "0", "1", "reuse", []byte("44"))
	if got := mustGet(t, r, "0", "1", "reuse", nil); string(got) != "44" {
		t.Fatalf("got %q", got)
	}
	mustMiss(t, r, "0", "1", "reuse", nil)
	// An old descriptor never reads a newer publication of its key, even
	// when wraparound puts the new frame at the same offset.
	first := mustPut(t, p, "0", "1", "stale", shmtest.CodeBytes(1))
	mustGet(t, r, "0", "1", "stale", &first)
	for i := range 20 {
		mustPut(t, p, "0", "1", fmt.Sprintf("filler%d", i), shmtest.CodeBytes(i))
		mustGet(t, r, "0", "1", fmt.Sprintf("filler%d", i), nil)
	}
	again := mustPut(t, p, "0", "1", "stale", shmtest.CodeBytes(2))
	if again.Position <= first.Position {
		t.Fatalf("positions not monotonic: %d then %d", first.Position, again.Position)
	}
	mustMiss(t, r, "0", "1", "stale", &first)
	if got := mustGet(t, r, "0", "1", "stale", &again); !bytes.Equal(got, shmtest.CodeBytes(2)) {
		t.Fatal("wrong value")
	}
}

func TestCancelAndExactPrefix(t *testing.T) {
	_, p, r := pair(t, 4096)
	for _, key := range []string{"req_0_0", "req_0_1", "req_0_10other", "request_0_0", "exact", "123", "12a"} {
		mustPut(t, p, "0", "1", key, []byte(key))
	}
	// The empty prefix selects the all-digit keys, as the seed's isdigit
	// and the per-key path do.
	if n := p.CancelPrefix(""); n != 1 {
		t.Fatalf(`CancelPrefix("") = %d, want 1`, n)
	}
	if n := p.CancelPrefix("req_0_"); n != 2 {
		t.Fatalf("CancelPrefix = %d, want 2", n)
	}
	if n := p.Cancel("exact"); n != 1 {
		t.Fatalf("Cancel = %d", n)
	}
	if n := p.Cancel("exact"); n != 0 {
		t.Fatalf("second Cancel = %d", n)
	}
	// Nothing left to retire: no ring lock is taken (a per-key put cancels
	// its key on every edge).
	before := p.work()
	if p.Cancel("exact")+p.Cancel("never-put")+p.CancelPrefix("req_0_") != 0 || p.work().flocks != before.flocks {
		t.Fatalf("cancelling what is not there locked the ring: %+v -> %+v", before, p.work())
	}
	mustMiss(t, r, "0", "1", "req_0_0", nil)
	mustMiss(t, r, "0", "1", "req_0_1", nil)
	mustMiss(t, r, "0", "1", "exact", nil)
	mustGet(t, r, "0", "1", "req_0_10other", nil)
	mustGet(t, r, "0", "1", "request_0_0", nil)
	mustMiss(t, r, "0", "1", "123", nil)
	mustGet(t, r, "0", "1", "12a", nil)
	mustPut(t, p, "0", "1", "next", shmtest.CodeBytes(0))
}

func TestEmptyPollNeitherScansNorLocks(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprintf("watcher=%v", watched), func(t *testing.T) {
			defer setWatcher(watched)()
			_, p, r := pair(t, 4096)
			mustPut(t, p, "0", "1", "prime-poll", []byte{1, 2, 3})
			mustGet(t, r, "0", "1", "prime-poll", nil)
			// Events of the producer's own registry update may still be on
			// their way to the watcher: wait for a miss that does no work.
			shmtest.Eventually(t, shmtest.Patience, "a quiet miss", func() bool {
				before := r.work()
				mustMiss(t, r, "0", "1", "missing-poll", nil)
				return r.work() == before || !watched && r.work().scans == before.scans
			})
			before := r.work()
			for i := range 128 {
				mustMiss(t, r, "0", "1", fmt.Sprintf("missing-poll-%d", i), nil)
			}
			after := r.work()
			if after.flocks != before.flocks || after.scans != before.scans {
				t.Fatalf("128 misses did work: %+v -> %+v", before, after)
			}
			// Without the watcher a miss stats the directory and checks the
			// producer, as the Python receiver does; with it, nothing.
			if err := r.WatchErr(); (err == nil) != watched {
				t.Fatalf("WatchErr = %v with the watcher %v", err, watched)
			}
			if watched {
				if after.stats != before.stats || after.liveness != before.liveness {
					t.Fatalf("watched misses stat the directory: %+v -> %+v", before, after)
				}
				if a := testing.AllocsPerRun(100, func() { r.Get("0", "1", "missing", nil, decodeCopy) }); a != 0 {
					t.Fatalf("%v allocations per miss", a)
				}
			}
			mustPut(t, p, "0", "1", "new-poll", []byte{4, 5})
			if got := mustGet(t, r, "0", "1", "new-poll", nil); !bytes.Equal(got, []byte{4, 5}) {
				t.Fatalf("got %v", got)
			}
		})
	}
}

func TestNewProducerFoundWhenClockDoesNotAdvance(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(fmt.Sprintf("watcher=%v", watched), func(t *testing.T) {
			defer setWatcher(watched)()
			sc, p, r := pair(t, 4096)
			mustPut(t, p, "0", "1", "first-producer", []byte{1})
			mustGet(t, r, "0", "1", "first-producer", nil)
			mustMiss(t, r, "0", "1", "second-producer", nil)
			old, complete := r.edgeStamp("0", "1")
			if !complete {
				t.Fatal("edge not discovered completely")
			}
			restore := setClock(func() int64 { return 0 })
			second := newTransport(t, sc, 4096)
			mustPut(t, second, "0", "1", "second-producer", []byte{2, 3})
			restore()
			// A producer in this process is seen at once, watcher or not.
			if got := mustGet(t, r, "0", "1", "second-producer", nil); !bytes.Equal(got, []byte{2, 3}) {
				t.Fatalf("got %v", got)
			}
			if now, _ := r.edgeStamp("0", "1"); now != old+1 {
				t.Fatalf("stamp %d, want previous %d + 1", now, old)
			}
		})
	}
}

func TestFanIn(t *testing.T) {
	sc, p, r := pair(t, 4096)
	q := newTransport(t, sc, 4096)
	mustPut(t, p, "0", "1", "fanin-first", []byte{1})
	mustPut(t, q, "2", "1", "fanin-second", []byte{2})
	if got := mustGet(t, r, "0", "1", "fanin-first", nil); got[0] != 1 {
		t.Fatal(got)
	}
	if got := mustGet(t, r, "2", "1", "fanin-second", nil); got[0] != 2 {
		t.Fatal(got)
	}
	mustMiss(t, r, "0", "1", "fanin-second", nil)
}

func TestDiscoveryAttachesEveryProducer(t *testing.T) {
	sc, p, r := pair(t, 4096)
	q := newTransport(t, sc, 4096)
	mustPut(t, p, "0", "1", "multi-first", []byte{1})
	mustPut(t, q, "0", "1", "multi-second", []byte{2})
	mustGet(t, r, "0", "1", "multi-first", nil)
	if n := len(r.readerFDs()); n != 2 {
		t.Fatalf("%d rings attached after the first hit, want 2", n)
	}
	before := r.work()
	mustGet(t, r, "0", "1", "multi-second", nil)
	if r.work().scans != before.scans {
		t.Fatal("second producer needed another directory scan")
	}
}

func TestClosedProducerReleasedByLiveReceiver(t *testing.T) {
	_, p, r := pair(t, 4096)
	d := mustPut(t, p, "0", "1", "close-cache", []byte{1})
	mustGet(t, r, "0", "1", "close-cache", nil)
	fds := r.readerFDs()
	fd, ok := fds[d.Name]
	if !ok || len(fds) != 1 {
		t.Fatalf("readers %v", fds)
	}
	p.Close()
	mustMiss(t, r, "0", "1", "not-published-after-close", nil)
	if n := len(r.readerFDs()); n != 0 {
		t.Fatalf("%d rings still attached after their producer closed", n)
	}
	if target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil && strings.Contains(target, d.Name) {
		t.Fatalf("fd %d still open on %s", fd, target)
	}
}

// withoutWaiting runs f, which must return while another process holds a
// lock it meets (it must not wait for it), and fails the test on its error.
func withoutWaiting(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(shmtest.Patience):
		t.Fatalf("%s waited for another process's lock", what)
	}
}

func TestReceiverNeverWaitsForAnotherProcessLock(t *testing.T) {
	for _, useDesc := range []bool{false, true} {
		t.Run(fmt.Sprintf("descriptor=%v", useDesc), func(t *testing.T) {
			_, p, r := pair(t, 4096)
			d := mustPut(t, p, "0", "1", "locked", []byte{0, 1, 2})
			var desc *descriptor.RingHandle
			if useDesc {
				desc = &d
			}
			holder := shmtest.HoldLock(t, scope.ShmDir+"/"+d.Name)
			withoutWaiting(t, "Get", func() error {
				_, ok, err := getBytes(r, "0", "1", "locked", desc)
				if ok {
					err = errors.New("got a frame through another process's lock")
				}
				return err
			})
			holder.Release(t)
			if got := mustGet(t, r, "0", "1", "locked", desc); !bytes.Equal(got, []byte{0, 1, 2}) {
				t.Fatal(got)
			}
		})
	}
}

// roleReceiver: args scope, key. Polls for key until it gets it, then
// keeps polling (to prove nothing is claimed twice) until told to stop.
func roleReceiver(args []string) int {
	tr, err := New(Options{Names: scope.New(args[0]), Capacity: 4096})
	if err != nil {
		return 1
	}
	defer tr.Close()
	shmtest.Say("ready")
	if shmtest.Hear() != "go" {
		return 1
	}
	stop := make(chan struct{})
	go func() { shmtest.Hear(); close(stop) }()
	claims := 0
	for {
		select {
		case <-stop:
			shmtest.Say("claims=%d", claims)
			return 0
		default:
		}
		if b, ok, err := getBytes(tr, "0", "1", args[1], nil); err != nil {
			shmtest.Say("error %v", err)
			return 1
		} else if ok {
			claims++
			shmtest.Say("got %x", b)
		}
	}
}

func TestTwoReceiverProcessesClaimOnce(t *testing.T) {
	sc := shmtest.Scope(t)
	p := newTransport(t, sc, 4096)
	key := "shared"
	d := mustPut(t, p, "0", "1", key, shmtest.CodeBytes(7))
	children := []*shmtest.Proc{shmtest.Start(t, "receiver", sc, key), shmtest.Start(t, "receiver", sc, key)}
	for _, c := range children {
		c.Expect(t, shmtest.Patience, "ready")
	}
	for _, c := range children {
		c.Send(t, "go")
	}
	// Wait until the frame is consumed, then let both report their claims.
	shmtest.Eventually(t, shmtest.Patience, "the frame to be claimed", func() bool {
		_, _, frames := ringFile(t, d)
		for _, f := range frames {
			if f.Position == d.Position {
				return f.Done
			}
		}
		return true // reclaimed
	})
	for _, c := range children {
		c.Send(t, "stop")
	}
	total := 0
	for _, c := range children {
		for {
			l := c.Line(t, shmtest.Patience)
			if l == fmt.Sprintf("got %x", shmtest.CodeBytes(7)) {
				continue
			}
			var n int
			if _, err := fmt.Sscanf(l, "claims=%d", &n); err != nil {
				t.Fatalf("child said %q", l)
			}
			total += n
			break
		}
	}
	if total != 1 {
		t.Fatalf("claimed %d times", total)
	}
	for _, c := range children {
		c.Exited(t, shmtest.Patience)
	}
	if _, err := os.Stat(scope.ShmDir + "/" + d.Name); err != nil {
		t.Fatalf("receivers removed the producer's ring: %v", err)
	}
}

func TestPutDoesNotAllocate(t *testing.T) {
	_, p, _ := pair(t, 4096)
	payload := shmtest.CodeBytes(3)
	write := func(dst []byte) error { copy(dst, payload); return nil }
	mustPut(t, p, "0", "1", "same", payload)
	// Re-publishing retires the previous frame, so the ring never fills.
	if a := testing.AllocsPerRun(200, func() {
		if _, ok, _ := p.Put("0", "1", "same", KindBytes, len(payload), write); !ok {
			t.Fatal("refused")
		}
	}); a != 0 {
		t.Fatalf("%v allocations per put", a)
	}
}

func TestConcurrentUse(t *testing.T) {
	_, p, r := pair(t, 1<<16)
	const producers, perProducer = 4, 200
	deadline := time.Now().Add(shmtest.Patience) // a lost frame fails the test, not hangs it
	var wg sync.WaitGroup
	published := make(chan string, producers*perProducer)
	for g := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perProducer {
				key := fmt.Sprintf("c%d_%d", g, i)
				for {
					_, ok, err := putBytes(p, "0", "1", key, []byte(key))
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("%s: ring still full at the deadline", key)
						return
					}
					p.Reap() // full: wait for receivers to consume
				}
				published <- key
			}
		}()
	}
	var claimed sync.Map
	var cwg sync.WaitGroup
	for range 4 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for key := range published {
				for {
					b, ok, err := getBytes(r, "0", "1", key, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						if string(b) != key {
							t.Errorf("%s: got %q", key, b)
						}
						if _, dup := claimed.LoadOrStore(key, true); dup {
							t.Errorf("%s claimed twice", key)
						}
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("%s: not received by the deadline", key)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(published)
	cwg.Wait()
	n := 0
	claimed.Range(func(any, any) bool { n++; return true })
	if n != producers*perProducer {
		t.Fatalf("%d claims, want %d", n, producers*perProducer)
	}
}

// A write that fails publishes nothing and retires nothing: the earlier
// version of the key is still delivered, and head did not move, even when
// the failed frame needed a padding frame first.
func TestFailedWritePublishesNothing(t *testing.T) {
	defer setRewind(false)() // the fillers place "k"
	_, p, r := pair(t, 4096)
	boom := errors.New("boom")
	fail := func(dst []byte) error { clear(dst); return boom }
	// Frames of "filler" whose totals take head from 64 to 4032: in the
	// second round "k" ends at 4064 and the failed 928-byte frame must pad.
	for _, fillers := range [][]int{nil, {1024, 1024, 1024, 896}} {
		for _, total := range fillers {
			mustPut(t, p, "0", "1", "filler", make([]byte, total-16-len("filler")))
			mustGet(t, r, "0", "1", "filler", nil)
		}
		old := mustPut(t, p, "0", "1", "k", []byte("old"))
		if fillers != nil && old.Position%4096 != 4032 {
			t.Fatalf("k at %d: the failed frame would not need padding", old.Position)
		}
		if _, ok, err := p.Put("0", "1", "k", KindBytes, 900, fail); ok || !errors.Is(err, boom) {
			t.Fatalf("failed write: ok=%v err=%v", ok, err)
		}
		if got := mustGet(t, r, "0", "1", "k", &old); string(got) != "old" {
			t.Fatalf("got %q", got)
		}
		next := mustPut(t, p, "0", "1", "next", []byte("x"))
		if next.Position != old.Position+32 {
			t.Fatalf("next frame at %d, want %d: the failed put moved head", next.Position, old.Position+32)
		}
		if got := mustGet(t, r, "0", "1", "next", nil); string(got) != "x" {
			t.Fatalf("got %q", got)
		}
	}
}

// A decode that declines a frame (ErrDeclined: the receiver's supplied
// memory is too small) leaves it ready, found again by the next receive,
// by key or by descriptor.
func TestDeclinedFrameStaysReady(t *testing.T) {
	_, p, r := pair(t, 4096)
	decline := func(Kind, []byte) (any, error) { return nil, fmt.Errorf("no room: %w", ErrDeclined) }
	for _, byDesc := range []bool{false, true} {
		key := fmt.Sprintf("declined%v", byDesc)
		d := mustPut(t, p, "0", "1", key, shmtest.CodeBytes(1))
		var desc *descriptor.RingHandle
		if byDesc {
			desc = &d
		}
		for range 2 {
			if _, ok, err := r.Receive("0", "1", key, desc, decline); ok || !errors.Is(err, ErrDeclined) {
				t.Fatalf("declined receive: ok=%v %v", ok, err)
			}
		}
		if got := mustGet(t, r, "0", "1", key, desc); !bytes.Equal(got, shmtest.CodeBytes(1)) {
			t.Fatalf("%s: wrong value after declines", key)
		}
	}
}

// Discovery without its watcher tells OnWatchFailure once, with the cause
// WatchErr gives, however many misses follow; with the watcher, never.
func TestOnWatchFailure(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprintf("watcher=%v", watched), func(t *testing.T) {
			defer setWatcher(watched)()
			sc := shmtest.Scope(t)
			p := newTransport(t, sc, 4096)
			var told []error
			r, err := New(Options{Names: scope.New(sc), Capacity: 4096, OnWatchFailure: func(err error) { told = append(told, err) }})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			mustPut(t, p, "0", "1", "first", []byte{1})
			mustGet(t, r, "0", "1", "first", nil)
			for i := range 10 {
				mustMiss(t, r, "0", "1", fmt.Sprintf("missing-%d", i), nil)
			}
			mustPut(t, p, "0", "1", "second", []byte{2})
			mustGet(t, r, "0", "1", "second", nil)
			switch {
			case watched && len(told) != 0:
				t.Fatalf("watched, yet told %v", told)
			case !watched && (len(told) != 1 || !errors.Is(told[0], errWatcherOff) || r.WatchErr() != told[0]):
				t.Fatalf("told %v, WatchErr %v; want errWatcherOff once", told, r.WatchErr())
			}
		})
	}
}
