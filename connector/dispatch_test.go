//go:build linux

package connector_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/race"
	"omnishm/internal/shmtest"
	"omnishm/proc"
	"omnishm/ring"
)

// waitSettled waits until n Recv calls wait in c's dispatcher and it has
// tried every one of them once.
func waitSettled(t *testing.T, c *connector.SHM, n int) {
	t.Helper()
	shmtest.Eventually(t, shmtest.Patience, strconv.Itoa(n)+" waiters to settle", func() bool {
		return c.Waiting() == n && connector.DispatchSettled(c)
	})
}

// A thousand goroutines wait in Recv on distinct keys; a producer process
// puts the keys one by one. Each waiter gets its own payload, once.
func TestThousandWaitersServedByAnotherProcess(t *testing.T) {
	const n = 1000
	for _, rc := range conntest.Rings {
		t.Run(rc.Name, func(t *testing.T) {
			sc := conntest.CrashScope(t, shmtest.Prefix())
			recv := conntest.Open(t, sc, "1", rc.Bytes)
			p := shmtest.Start(t, "fanout", sc, strconv.Itoa(rc.Bytes))
			defer p.Send(t, "")
			ctx, cancel := context.WithTimeout(context.Background(), 2*shmtest.Patience)
			defer cancel()
			keys := make([]string, n)
			for i := range keys {
				keys[i] = shmtest.Key("many")
			}
			got := make([]int64, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, key := range keys {
				wg.Go(func() {
					v, _, err := recv.Recv(ctx, "0", key)
					if err != nil {
						errs[i] = err
						return
					}
					got[i] = conntest.CodesOf(t, v)[0]
				})
			}
			waitSettled(t, recv, n)
			for i, key := range keys {
				p.Send(t, key+" "+strconv.Itoa(10_000+i))
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range got {
				if v != int64(10_000+i) {
					t.Fatalf("waiter %d got %d", i, v)
				}
			}
			for _, key := range keys {
				conntest.Missing(t, recv, "0", "1", key, nil)
			}
			if h := recv.Health(); h.Gets != n {
				t.Fatalf("health %+v: want %d gets", h, n)
			}
		})
	}
}

// A put wakes only its own waiter: the ring scans, ring claims and per-key
// tries per delivered message are the same with 10 waiters as with 500.
func TestPutWakesOnlyItsOwnWaiter(t *testing.T) {
	for _, rc := range []struct {
		name  string
		bytes int
	}{{"ring", ring.DefaultCapacity}, {"per-key", connector.NoRing}} {
		t.Run(rc.name, func(t *testing.T) {
			var per []connector.DispatchWork
			for _, waiters := range []int{10, 500} {
				per = append(per, workPerMessage(t, rc.bytes, waiters))
			}
			t.Logf("work for %d messages with 10 and 500 waiters: %+v", messages, per)
			if per[0] != per[1] {
				t.Fatalf("the work depends on the number of waiters: %+v with 10, %+v with 500", per[0], per[1])
			}
			// One locked scan and one claim per put, or one per-key try.
			want := connector.DispatchWork{RingScans: messages, RingClaims: messages}
			if rc.bytes == connector.NoRing {
				want = connector.DispatchWork{SegmentTries: messages}
			}
			if per[0] != want {
				t.Fatalf("work for %d messages %+v, want %+v", messages, per[0], want)
			}
		})
	}
}

// messages is how many puts workPerMessage counts the work of.
const messages = 5

// workPerMessage delivers messages to some of waiters goroutines in Recv,
// one put at a time, and returns the dispatcher's work for all of them.
func workPerMessage(t *testing.T, ringBytes, waiters int) connector.DispatchWork {
	sc := shmtest.Scope(t)
	// An hour between polls: no timer runs during the count.
	recv, err := connector.Open(connector.Options{WakeupScope: sc, StageID: "1", HostRingBytes: ringBytes, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	send := conntest.Open(t, sc, "0", ringBytes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The producer's ring exists and is attached before the count.
	conntest.MustPut(t, send, "0", "1", shmtest.Key("prime"), conntest.Codes(1, 0))
	keys := make([]string, waiters)
	done := make(chan error, waiters)
	for i := range keys {
		keys[i] = shmtest.Key("own")
		go func() {
			_, _, err := recv.Recv(ctx, "0", keys[i])
			done <- err
		}()
	}
	waitSettled(t, recv, waiters)
	before := connector.Dispatched(recv)
	for i := range messages {
		conntest.MustPut(t, send, "0", "1", keys[i], conntest.Codes(1, int64(i)))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		waitSettled(t, recv, waiters-i-1)
	}
	after := connector.Dispatched(recv)
	// Sweeps are not counted: one runs per serve and waited edge, and a
	// sweep of rings whose heads did not move makes no system call.
	d := connector.DispatchWork{
		RingScans:    after.RingScans - before.RingScans,
		RingClaims:   after.RingClaims - before.RingClaims,
		SegmentTries: after.SegmentTries - before.SegmentTries,
		FullChecks:   after.FullChecks - before.FullChecks,
	}
	cancel()
	for range waiters - messages {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a waiter without a message ended with %v", err)
		}
	}
	return d
}

// A Recv whose ctx ends returns ctx.Err() and leaves the dispatcher; one
// on a connector that closes returns ErrClosed.
func TestRecvCancelAndClose(t *testing.T) {
	sc := shmtest.Scope(t)
	recv, err := connector.Open(connector.Options{WakeupScope: sc, StageID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { _, _, err := recv.Recv(ctx, "0", shmtest.Key("cancel")); errs <- err }()
	go func() { _, _, err := recv.Recv(context.Background(), "0", shmtest.Key("close")); errs <- err }()
	waitSettled(t, recv, 2)
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Recv: %v", err)
	}
	waitSettled(t, recv, 1)
	if err := recv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("Recv across Close: %v", err)
	}
	if _, _, err := recv.Recv(context.Background(), "0", "after"); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
}

// Messages say who published them: the ring's creator; nobody for a
// per-key segment.
func TestMessageNamesTheProducer(t *testing.T) {
	self, err := proc.Self()
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range []struct {
		name  string
		bytes int
		want  proc.ID
	}{{"ring", ring.DefaultCapacity, self}, {"per-key", connector.NoRing, proc.ID{}}} {
		t.Run(rc.name, func(t *testing.T) {
			send, recv := conntest.Edge(t, rc.bytes)
			key := shmtest.Key("who")
			conntest.MustPut(t, send, "0", "1", key, conntest.Codes(2, 5))
			m, ok, err := recv.GetMessage("0", "1", key, nil)
			if !ok || err != nil || m.Producer != rc.want || conntest.CodesOf(t, m.Payload)[0] != 5 {
				t.Fatalf("GetMessage: %+v ok=%v err=%v, want producer %v", m, ok, err, rc.want)
			}
			key = shmtest.Key("who-waits")
			ctx, cancel := context.WithTimeout(context.Background(), shmtest.Patience)
			defer cancel()
			got := make(chan connector.Message, 1)
			go func() {
				m, err := recv.RecvMessage(ctx, "0", key)
				if err != nil {
					t.Error(err)
				}
				got <- m
			}()
			waitSettled(t, recv, 1)
			conntest.MustPut(t, send, "0", "1", key, conntest.Codes(2, 6))
			if m := <-got; m.Producer != rc.want || conntest.CodesOf(t, m.Payload)[0] != 6 {
				t.Fatalf("RecvMessage: %+v, want producer %v", m, rc.want)
			}
		})
	}
}

// Without wakeups the dispatcher polls: a Recv still returns, whether the
// stage has no FIFO or its FIFO's Await fails while the Recv waits (the
// dispatcher then falls back to polling once, not at every look).
func TestRecvWithoutWakeups(t *testing.T) {
	for _, tc := range []struct {
		name      string
		disable   bool
		fallbacks int64
	}{{"disabled", true, 0}, {"await fails", false, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			conntest.EachRing(t, func(t *testing.T, sc string, ringBytes int) {
				send := conntest.Open(t, sc, "0", ringBytes)
				recv, err := connector.Open(connector.Options{WakeupScope: sc, StageID: "1", HostRingBytes: ringBytes, DisableWakeups: tc.disable, PollInterval: 5 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				defer recv.Close()
				key := shmtest.Key("nowake")
				got := make(chan error, 1)
				go func() {
					v, _, err := recv.Recv(context.Background(), "0", key)
					if err == nil && conntest.CodesOf(t, v)[0] != 9 {
						err = errors.New("wrong payload")
					}
					got <- err
				}()
				waitSettled(t, recv, 1)
				if !tc.disable {
					connector.BreakAwait(recv)
					shmtest.Eventually(t, shmtest.Patience, "the dispatcher to poll", func() bool { return connector.Dispatched(recv).AwaitFallbacks > 0 })
				}
				conntest.MustPut(t, send, "0", "1", key, conntest.Codes(1, 9))
				if err := <-got; err != nil {
					t.Fatal(err)
				}
				if n := connector.Dispatched(recv).AwaitFallbacks; n != tc.fallbacks {
					t.Fatalf("%d falls back to polling, want %d", n, tc.fallbacks)
				}
			})
		})
	}
}

// unpolledEdge is a sender of stage 0 and a receiver of stage 1 on the
// default ring whose safety re-poll is an hour away and which does not
// spin: only wakeups and the dispatcher's own retries deliver.
func unpolledEdge(t *testing.T) (send, recv *connector.SHM) {
	sc := shmtest.Scope(t)
	send = conntest.Open(t, sc, "0", ring.DefaultCapacity)
	recv, err := connector.Open(connector.Options{WakeupScope: sc, StageID: "1", HostRingBytes: ring.DefaultCapacity, PollInterval: time.Hour, Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recv.Close() })
	return send, recv
}

// A Recv that comes while the dispatcher serves leaves its ring claim to
// that serve, which takes the frame with the others it claims, under one
// ring lock: the Recv takes none of its own (it used to claim the frame
// itself, its lock meeting the sweep's hold of the ring). One whose ctx has
// ended still takes a frame that is there, as it does without a serve
// under way: it does not wait for one.
func TestRecvDuringAServeLeavesTheClaimToIt(t *testing.T) {
	send, recv := unpolledEdge(t)
	ctx, cancel := context.WithTimeout(t.Context(), shmtest.Patience)
	defer cancel()
	prime, other, late := shmtest.Key("prime"), shmtest.Key("other"), shmtest.Key("late")
	conntest.MustPut(t, send, "0", "1", prime, conntest.Codes(1, 0))
	conntest.MustGet(t, recv, "0", "1", prime, nil) // the ring is attached
	var during atomic.Pointer[func()]
	connector.OnServe(recv, func() {
		if f := during.Swap(nil); f != nil {
			(*f)()
		}
	})
	type got struct {
		v   any
		err error
	}
	check := func(what string, r got, code int64) {
		t.Helper()
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		if codes := conntest.CodesOf(t, r.v); !slices.Equal(codes, []int64{code}) {
			t.Fatalf("%s got %v", what, codes)
		}
	}
	otherDone := make(chan error, 1)
	go func() { _, _, err := recv.Recv(ctx, "0", other); otherDone <- err }()
	waitSettled(t, recv, 1)

	// The frame is there, indexed, before the serve the late Recv comes
	// in: a serve that began before its put (a wakeup of an earlier one)
	// would have had nothing to claim.
	scans := connector.Dispatched(recv).RingScans
	conntest.MustPut(t, send, "0", "1", late, conntest.Codes(1, 7)) // swept with nobody waiting: indexed
	shmtest.Eventually(t, shmtest.Patience, "the late frame swept", func() bool {
		return connector.Dispatched(recv).RingScans > scans && connector.DispatchSettled(recv)
	})
	before := connector.Dispatched(recv)
	lateDone := make(chan got, 1)
	comeLate := func() {
		// The serve goes on once the late Recv waits or has its frame.
		go func() { v, _, err := recv.Recv(ctx, "0", late); lateDone <- got{v, err} }()
		for ctx.Err() == nil && recv.Waiting() < 2 && len(lateDone) == 0 {
			runtime.Gosched()
		}
	}
	during.Store(&comeLate)
	conntest.MustPut(t, send, "0", "1", shmtest.Key("wake"), conntest.Codes(1, 6)) // wakes the leader
	check("the late Recv", <-lateDone, 7)
	if after := connector.Dispatched(recv); after.RingClaims-before.RingClaims != 1 {
		t.Fatalf("the serve under way claimed %d frames: the Recv that came during it claimed its own", after.RingClaims-before.RingClaims)
	}

	there, poke := shmtest.Key("there"), shmtest.Key("poke")
	scans = connector.Dispatched(recv).RingScans
	conntest.MustPut(t, send, "0", "1", there, conntest.Codes(1, 8)) // swept with nobody waiting: indexed
	shmtest.Eventually(t, shmtest.Patience, "the frame swept", func() bool {
		return connector.Dispatched(recv).RingScans > scans && connector.DispatchSettled(recv)
	})
	ended, end := context.WithCancel(ctx)
	end()
	thereDone := make(chan got, 1)
	comeEnded := func() { v, _, err := recv.Recv(ended, "0", there); thereDone <- got{v, err} }
	during.Store(&comeEnded)
	conntest.MustPut(t, send, "0", "1", poke, conntest.Codes(1, 9)) // wakes the leader
	check("a Recv whose ctx ended", <-thereDone, 8)

	conntest.MustPut(t, send, "0", "1", other, conntest.Codes(1, 1))
	if err := <-otherDone; err != nil {
		t.Fatal(err)
	}
}

// A waiter that a serve delivered to and that waits again at once (a stage
// reading request after request) is served by the dispatcher, its frame
// claimed with the next serve's others, not by a ring claim of its own:
// the leader yields before its serve counts as over, so the waiters it
// woke run and wait while a serve is under way. The leader used to go on
// to its sleep first, and the waiter's Recv then claimed its frame itself
// (one ring lock and liveness check per delivery, where a serve takes one
// for all it claims). A yield lets the woken waiters run first only most of
// the time (see serveYield): the test holds the leader at its yield until
// the woken waiter waits again, so that it checks the serve, not the
// scheduler.
func TestWokenWaiterWaitsAgainDuringTheServe(t *testing.T) {
	// One P: a woken waiter runs where the leader holds, not beside its
	// serve on another.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	send, recv := unpolledEdge(t)
	ctx, cancel := context.WithTimeout(t.Context(), shmtest.Patience)
	defer cancel()
	prime, other, first, next := shmtest.Key("prime"), shmtest.Key("other"), shmtest.Key("first"), shmtest.Key("next")
	conntest.MustPut(t, send, "0", "1", prime, conntest.Codes(1, 0))
	conntest.MustGet(t, recv, "0", "1", prime, nil) // the ring is attached
	var yields atomic.Int32
	done := make(chan error, 1)
	connector.OnYield(recv, func() {
		if yields.Add(1) != 1 {
			return
		}
		// The woken waiter waits again (other's is the first), or is done.
		for ctx.Err() == nil && recv.Waiting() < 2 && len(done) == 0 {
			runtime.Gosched()
		}
	})
	otherDone := make(chan error, 1)
	go func() { _, _, err := recv.Recv(ctx, "0", other); otherDone <- err }()
	waitSettled(t, recv, 1)
	var v any // the next Recv's, read once done has its error
	go func() {
		_, _, err := recv.Recv(ctx, "0", first)
		if err == nil {
			v, _, err = recv.Recv(ctx, "0", next) // at once, as it is woken
		}
		done <- err
	}()
	waitSettled(t, recv, 2)
	before := connector.Dispatched(recv)
	conntest.MustPut(t, send, "0", "1", next, conntest.Codes(1, 2))  // swept with nobody waiting: indexed
	conntest.MustPut(t, send, "0", "1", first, conntest.Codes(1, 1)) // wakes the leader
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if codes := conntest.CodesOf(t, v); !slices.Equal(codes, []int64{2}) {
		t.Fatalf("the next Recv got %v", codes)
	}
	if yields.Load() == 0 {
		t.Fatal("the leader did not yield after a serve that delivered while another waiter waited")
	}
	if claims := connector.Dispatched(recv).RingClaims - before.RingClaims; claims != 2 {
		t.Fatalf("the dispatcher claimed %d of the two frames: the woken waiter claimed its next itself", claims)
	}
	conntest.MustPut(t, send, "0", "1", other, conntest.Codes(1, 3))
	if err := <-otherDone; err != nil {
		t.Fatal(err)
	}
}

// A new waiter whose frame was indexed already (swept while nobody waited
// for it) but whose first sweep met the producer's ring lock is retried
// until a sweep of every waited key succeeds: a wakeup's sweep in between,
// which looks only at new frames, does not end the retry. (It did: a
// stream of 1 MiB frames, whose producer holds the lock for each copy,
// stalled until the safety re-poll.) With PollInterval at an hour, only the
// retry can deliver it.
func TestBusySweepRetriesAnIndexedFrame(t *testing.T) {
	send, recv := unpolledEdge(t)
	ctx, cancel := context.WithTimeout(t.Context(), shmtest.Patience)
	defer cancel()
	other, indexed, wake := shmtest.Key("other"), shmtest.Key("indexed"), shmtest.Key("wake")
	recvErr := func(key string) chan error {
		ch := make(chan error, 1)
		go func() { _, _, err := recv.Recv(ctx, "0", key); ch <- err }()
		return ch
	}
	// A waiter of another key makes the dispatcher sweep the next frame:
	// indexed, with nobody waiting for it.
	otherDone := recvErr(other)
	waitSettled(t, recv, 1)
	scans := connector.Dispatched(recv).RingScans
	d := conntest.MustPut(t, send, "0", "1", indexed, conntest.Codes(1, 1))
	shmtest.Eventually(t, shmtest.Patience, "the frame swept", func() bool {
		return connector.Dispatched(recv).RingScans > scans && connector.DispatchSettled(recv)
	})
	// The producer's lock, as a put in progress holds it.
	lock := conntest.HoldRing(t, d)
	indexedDone := recvErr(indexed)
	// Busy sweeps back off: let the retry's delay grow past a put.
	sweeps := connector.Dispatched(recv).Sweeps
	shmtest.Eventually(t, shmtest.Patience, "busy retries", func() bool { return connector.Dispatched(recv).Sweeps >= sweeps+6 })
	lock.Release(t)
	conntest.MustPut(t, send, "0", "1", wake, conntest.Codes(1, 2)) // a wakeup, a new frame
	if err := <-indexedDone; err != nil {
		t.Fatalf("Recv of the indexed frame: %v", err)
	}
	conntest.MustPut(t, send, "0", "1", other, conntest.Codes(1, 3))
	if err := <-otherDone; err != nil {
		t.Fatal(err)
	}
}

// A producer skips the wakeup of a ring frame while the receiver announces
// no sleep (wake.Notifier.NotifyRing); the leader looks at the rings again
// after announcing one, serving what came meanwhile, up to RecheckLimit
// times. A frame put just before the last look still gets served soon: the
// leader used to sleep past it until the safety re-poll (an hour here, so
// only the look after the limit can deliver it). The hook puts a frame of
// another key before each look, and the waited key's before the last.
func TestFramePutAtTheRecheckLimitIsServed(t *testing.T) {
	send, recv := unpolledEdge(t)
	key := shmtest.Key("late")
	var armed atomic.Bool
	var made atomic.Int64
	puts := make(chan error, connector.RecheckLimit+2)
	put := func(k string) {
		_, _, err := send.Put("0", "1", k, conntest.Codes(1, 1))
		made.Add(1)
		puts <- err
	}
	connector.OnRecheck(recv, func(i int) {
		switch {
		case !armed.Load():
		case i < connector.RecheckLimit:
			put(shmtest.Key("filler"))
		default:
			armed.Store(false)
			put(key)
		}
	})
	done := make(chan error, 1)
	// No deadline: a Recv that ends on one tries the rings once more.
	go func() { _, _, err := recv.Recv(context.Background(), "0", key); done <- err }()
	waitSettled(t, recv, 1)
	armed.Store(true)
	put(shmtest.Key("filler")) // the leader sleeps: this one wakes it
	if err := shmtest.Await(t, shmtest.Patience, "the Recv of the frame put at the limit", done); err != nil {
		t.Fatalf("Recv: %v", err)
	}
	// Armed while the leader was in its recheck loop (waitSettled does
	// not wait for its sleep), the hook began at a later look and put
	// fewer fillers: as many results as puts, which the hook makes no more.
	for range made.Load() {
		if err := <-puts; err != nil {
			t.Fatalf("put: %v", err)
		}
	}
}

// A new waiter's key whose lock-file close the dispatcher did not see
// (made before its watch started) or saw but could not keep (events lost
// in an overflow, more closes than it remembers) still has its per-key
// segment found at once: with its wakeup served before the waiter comes
// and the safety re-poll an hour away, only that first try can deliver it.
func TestNewWaiterFindsAnUnseenSegment(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(c *connector.SHM) // what the dispatcher loses before the put; nil: put before the receiver opens
	}{
		{"published before the watch", nil},
		{"close lost in an overflow", connector.LoseHints},
		{"more closes than remembered", connector.DropRecent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := shmtest.Scope(t)
			send := conntest.Open(t, sc, "0", connector.NoRing)
			key := shmtest.Key("unseen")
			put := func() { conntest.MustPut(t, send, "0", "1", key, conntest.Codes(1, 7)) }
			if tc.lose == nil {
				put()
			}
			recv, err := connector.Open(connector.Options{WakeupScope: sc, StageID: "1", HostRingBytes: connector.NoRing, PollInterval: time.Hour, Spin: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer recv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), shmtest.Patience)
			defer cancel()
			if tc.lose != nil {
				// Another waiter keeps the dispatcher reading events.
				other := make(chan error, 1)
				go func() {
					_, _, err := recv.Recv(ctx, "0", shmtest.Key("other"))
					other <- err
				}()
				defer func() {
					cancel()
					<-other
				}()
				waitSettled(t, recv, 1)
				tc.lose(recv)
				put()
				waitSettled(t, recv, 1) // its wakeup served: its close read, if seen
			}
			v, _, err := recv.Recv(ctx, "0", key)
			if err != nil {
				t.Fatal(err)
			}
			if got := conntest.CodesOf(t, v)[0]; got != 7 {
				t.Fatalf("got %d, want 7", got)
			}
		})
	}
}

// A new waiter whose key no lock-file close named costs no per-key try:
// the dispatcher's watch vouches that no segment of it was published.
func TestNewWaiterCostsNoTry(t *testing.T) {
	sc := shmtest.Scope(t)
	recv, err := connector.Open(connector.Options{WakeupScope: sc, StageID: "1", HostRingBytes: connector.NoRing, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 20
	done := make(chan error, n)
	for range n {
		key := shmtest.Key("quiet")
		go func() {
			_, _, err := recv.Recv(ctx, "0", key)
			done <- err
		}()
	}
	waitSettled(t, recv, n)
	if w := connector.Dispatched(recv); w.SegmentTries != 0 || w.FullChecks != 0 {
		t.Fatalf("work for %d new waiters: %+v, want no per-key try", n, w)
	}
	cancel()
	for range n {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a waiter ended with %v", err)
		}
	}
}

// The dispatcher keeps the buffer its new waiters' keys go into, across a
// serve that takes them twice and a leader that leaves: a thousand waiters
// each time grew a new one from nothing (in the waiters' own goroutines).
func TestFreshWaitersAllocateNoBuffer(t *testing.T) {
	if race.Enabled {
		t.Skip("allocations are not countable under the race detector (sync.Pool drops items)")
	}
	sc := shmtest.Scope(t)
	recv, err := connector.Open(connector.Options{WakeupScope: sc, StageID: "1", PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = shmtest.Key("fresh")
	}
	cycle := connector.FreshCycle(recv, keys)
	cycle() // the buffers and the waiters' pool fill up
	if n := testing.AllocsPerRun(10, cycle); n >= 1 {
		t.Fatalf("%v allocations per thousand waiters served and gone, want none", n)
	}
}

// A receiver that takes its ring frames with Get alone sleeps on no FIFO:
// puts to its stage write it no wakeup. Once it waits in Recv, which
// announces its sleeps, a put wakes it again (unpolledEdge: nothing but a
// wakeup can deliver).
func TestGetOnlyReceiverGetsNoWakeups(t *testing.T) {
	send, recv := unpolledEdge(t)
	prefix := shmtest.Key("getonly")
	for i := range 20 {
		key := prefix + strconv.Itoa(i)
		conntest.MustPut(t, send, "0", "1", key, conntest.Codes(1, int64(i)))
		if v, _, ok, err := recv.Get("0", "1", key, nil); !ok || err != nil || conntest.CodesOf(t, v)[0] != int64(i) {
			t.Fatalf("Get %s: %v, %v, %v", key, v, ok, err)
		}
	}
	if n := connector.WakeupsReceived(recv); n != 0 {
		t.Fatalf("%d wakeups written to a receiver that never slept, want 0", n)
	}
	key := prefix + "-recv"
	got := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), shmtest.Patience)
	defer cancel()
	go func() {
		_, _, err := recv.Recv(ctx, "0", key)
		got <- err
	}()
	waitSettled(t, recv, 1)
	conntest.MustPut(t, send, "0", "1", key, conntest.Codes(1, 1))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
