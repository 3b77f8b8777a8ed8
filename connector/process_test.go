//go:build linux

package connector_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

const wait = 20 * time.Second

func startProducer(t *testing.T, scope string, ringBytes int, key string, n, start int) (*shmtest.Proc, *connector.Descriptor) {
	t.Helper()
	p := shmtest.Start(t, "producer", scope, strconv.Itoa(ringBytes), key, strconv.Itoa(n), strconv.Itoa(start))
	d, err := descriptor.Parse([]byte(p.Line(t, wait)), key)
	if err != nil {
		t.Fatal(err)
	}
	return p, d
}

func TestCrossProcessPutAndGet(t *testing.T) {
	for _, ringBytes := range []int{ring.DefaultCapacity, connector.NoRing} {
		t.Run("ring="+strconv.Itoa(ringBytes), func(t *testing.T) {
			s := shmtest.Scope(t)
			key := shmtest.Key("xproc")
			p, d := startProducer(t, s, ringBytes, key, 56, 100)
			if (d.HostRing != nil) != (ringBytes > 0) {
				t.Fatalf("descriptor %v with ring bytes %d", d, ringBytes)
			}
			receiver := conntest.Open(t, s, "1", ringBytes)
			got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, nil))
			if len(got) != 56 || got[0] != 100 || got[55] != 155 {
				t.Fatalf("got %v", got)
			}
			conntest.Missing(t, receiver, "0", "1", key, nil)
			p.Send(t, "close")
			if l := p.Line(t, wait); l != "closed" {
				t.Fatal(l)
			}

			// And the other way round: the parent produces, a child receives.
			sender := conntest.Open(t, s, "0", ringBytes)
			key2 := shmtest.Key("xproc-back")
			conntest.MustPut(t, sender, "0", "1", key2, conntest.Codes(5, 7))
			r := shmtest.Start(t, "receiver", s, key2)
			r.Line(t, wait)
			r.Send(t, "go")
			if l := r.Line(t, wait); l != "[7,8,9,10,11]" {
				t.Fatalf("child received %s", l)
			}
			if err := r.Wait(t, wait); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTwoReaderProcessesClaimExactlyOnce(t *testing.T) {
	for _, ringBytes := range []int{ring.DefaultCapacity, connector.NoRing} {
		t.Run("ring="+strconv.Itoa(ringBytes), func(t *testing.T) {
			s := shmtest.Scope(t)
			sender := conntest.Open(t, s, "0", ringBytes)
			key := shmtest.Key("shared")
			d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(56, 0))
			readers := []*shmtest.Proc{shmtest.Start(t, "receiver", s, key), shmtest.Start(t, "receiver", s, key)}
			for _, r := range readers {
				r.Line(t, wait)
			}
			for _, r := range readers {
				r.Send(t, "go")
			}
			var got []string
			for _, r := range readers {
				got = append(got, r.Line(t, wait))
				if err := r.Wait(t, wait); err != nil {
					t.Fatal(err)
				}
			}
			misses := 0
			for _, g := range got {
				if g == "miss" {
					misses++
				} else if !strings.HasPrefix(g, "[0,1,2,") || !strings.HasSuffix(g, ",55]") {
					t.Fatalf("a reader got %s", g)
				}
			}
			if misses != 1 {
				t.Fatalf("results %v: want exactly one claim", got)
			}
			if d.HostRing != nil {
				// Readers never unlink a producer's allocation.
				if _, err := os.Stat(scope.Path(d.HostRing.Name)); err != nil {
					t.Fatal(err)
				}
			} else {
				for _, p := range []string{scope.Path(key), scope.Path(scope.LockName(key))} {
					if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
						t.Fatalf("%s left after the claim: %v", p, err)
					}
				}
			}
		})
	}
}

func TestDeadlineReceiveNeverWaitsForAnotherProcessRingLock(t *testing.T) {
	for _, useDescriptor := range []bool{false, true} {
		sender, receiver := conntest.Edge(t, 4096)
		d := conntest.MustPut(t, sender, "0", "1", "locked", conntest.Codes(3, 0))
		holder := shmtest.HoldLock(t, scope.Path(d.HostRing.Name))
		var desc *connector.Descriptor
		if useDescriptor {
			desc = &d
		}
		// The holder keeps the lock until told: waiting on it would hang here.
		if _, _, ok, err := receiver.GetWithDeadline("0", "1", "locked", desc, time.Now().Add(time.Hour)); ok || err != nil {
			t.Fatalf("got ok=%v err=%v under another process's lock", ok, err)
		}
		holder.Release(t)
		if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "locked", desc)); len(got) != 3 {
			t.Fatal(got)
		}
	}
}

func TestDeadProducerPayloadCannotReachAReusedKey(t *testing.T) {
	s := shmtest.Scope(t)
	conntest.RemoveAtEnd(t, scope.New(s))
	p, old := startProducer(t, s, ring.DefaultCapacity, "restart", 1, 11)
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	// Attach the live ring without claiming its frame.
	conntest.Missing(t, receiver, "0", "1", "not-published", nil)
	p.Send(t, "exit") // leaves without closing: its frame stays in the ring
	if err := p.Wait(t, wait); err != nil {
		t.Fatal(err)
	}
	conntest.Missing(t, receiver, "0", "1", "restart", old)
	conntest.Missing(t, receiver, "0", "1", "restart", nil)
	replacement := conntest.Open(t, s, "0", ring.DefaultCapacity)
	conntest.MustPut(t, replacement, "0", "1", "restart", conntest.Codes(1, 22))
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "restart", nil)); got[0] != 22 {
		t.Fatalf("got %v: a dead producer's frame was delivered", got)
	}
	shmtest.Eventually(t, wait, "the watchdog to remove the dead producer's ring", func() bool {
		_, err := os.Stat(scope.Path(old.HostRing.Name))
		return errors.Is(err, os.ErrNotExist)
	})
}

func TestKilledProducerLeavesNoPayloadFiles(t *testing.T) {
	s := shmtest.Scope(t)
	conntest.RemoveAtEnd(t, scope.New(s))
	ringKey, bigKey := shmtest.Key("killed-ring"), shmtest.Key("killed-big")
	p, ringDesc := startProducer(t, s, ring.DefaultCapacity, ringKey, 3, 0)
	p.Send(t, "put "+bigKey+" 200000 0") // 1.6 MB: beyond a quarter of the ring
	var bigDesc connector.Descriptor
	if err := json.Unmarshal([]byte(p.Line(t, wait)), &bigDesc); err != nil || bigDesc.Shm == nil || ringDesc.HostRing == nil {
		t.Fatalf("descriptors %v %v %v", ringDesc, bigDesc, err)
	}
	names := scope.New(s)
	files := []string{scope.Path(ringDesc.HostRing.Name), scope.Path(bigKey), scope.Path(scope.LockName(bigKey)),
		names.MarkerPath(ringDesc.HostRing.Name), names.RingDir()}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
	}
	p.Kill()
	// The watchdog removes them all, the ring's marker with the registry
	// stamp update a receiver caches discovery on.
	shmtest.Eventually(t, wait, "the killed producer's files to be removed", func() bool {
		for _, f := range files {
			if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
				return false
			}
		}
		return true
	})
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	conntest.Missing(t, receiver, "0", "1", ringKey, nil)
}

func TestWakeupEndsABlockedRecv(t *testing.T) {
	for _, ringBytes := range []int{ring.DefaultCapacity, connector.NoRing} {
		s := shmtest.Scope(t)
		key := shmtest.Key("wake")
		r := shmtest.Start(t, "recv", s, key, "60s")
		if l := r.Line(t, wait); l != "waiting" {
			t.Fatal(l)
		}
		sender := conntest.Open(t, s, "0", ringBytes)
		// The child's FIFO exists once it said "waiting"; it polls only hourly,
		// so only the put's wakeup can end its Recv before our line timeout.
		conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 42))
		if l := r.Line(t, wait); l != "got 42" {
			t.Fatalf("ring=%d: %s", ringBytes, l)
		}
		if err := r.Wait(t, wait); err != nil {
			t.Fatal(err)
		}
	}
}

// Ring producers skip the wakeup of a receiver whose dispatcher is awake
// (wake.Notifier.NotifyRing): none may be lost. A receiver process that
// never polls receives, on several goroutines, keys a producer puts as soon
// as the previous one of that goroutine arrived, so puts meet the
// dispatcher both asleep and busy; with one goroutine, each put meets it
// about to sleep. A lost wakeup leaves a Recv blocked and the test failing
// at its deadline.
func TestSkippedWakeupsLoseNone(t *testing.T) {
	for _, tc := range []struct{ waiters, messages int }{{1, 400}, {4, 150}} {
		t.Run(strconv.Itoa(tc.waiters), func(t *testing.T) {
			s := shmtest.Scope(t)
			prefix := shmtest.Key("sleep")
			r := shmtest.Start(t, "sleeper", s, prefix, strconv.Itoa(tc.waiters), strconv.Itoa(tc.messages))
			if l := r.Line(t, wait); l != "ready" {
				t.Fatal(l)
			}
			sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
			put := func(g, j int) {
				if j > 0 && rand.N(2) == 0 {
					for range rand.N(50) { // vary where the put meets the dispatcher
						runtime.Gosched()
					}
				}
				conntest.MustPut(t, sender, "0", "1", sleeperKey(prefix, g, j), conntest.Codes(1, int64(g*tc.messages+j)))
			}
			for g := range tc.waiters {
				put(g, 0)
			}
			for range tc.waiters * tc.messages {
				var g, j int
				l := r.Line(t, wait)
				if _, err := fmt.Sscanf(l, "got %d %d", &g, &j); err != nil {
					t.Fatalf("receiver: %s", l)
				}
				if j+1 < tc.messages {
					put(g, j+1)
				}
			}
			if l := r.Line(t, wait); l != "done" {
				t.Fatal(l)
			}
			if err := r.Wait(t, wait); err != nil {
				t.Fatal(err)
			}
		})
	}
}
