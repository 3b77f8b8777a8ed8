//go:build linux

package connector_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

// The test binary is also every child process of the package's
// cross-process tests: shmtest re-runs it in one of these roles.
func TestMain(m *testing.M) {
	roles := conntest.ChildRoles(openChild)
	shmtest.Main(m, map[string]func([]string) int{
		"producer": roles.Put,  // scope ringBytes [key n start]
		"receiver": roles.Get,  // scope key [descriptor]
		"recv":     roles.Recv, // scope key timeout
		"sleeper":  roleSleeper,
		"pending":  rolePending,
		"flood":    roleFlood,

		"soakproducer":  roleSoakProducer,
		"soakreceiver":  roleSoakReceiver,
		"fanout":        roleFanoutProducer,
		"batchproducer": roleBatchProducer,
		"asnobody":      roleAsNobody,
		"noinotify":     roleNoInotify,
	})
}

// Child roles. Arguments are positional; results are JSON lines on stdout.

// openChild opens a child's connector on the scope args[0]: as stage 0
// with HostRingBytes args[1], or as stage 1 that only a wakeup can end a
// Recv of before its timeout (no polling).
func openChild(stage connector.Stage, args []string) (connector.Receiver, []string, error) {
	if stage == "0" {
		ringBytes, _ := strconv.Atoi(args[1])
		c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: stage, HostRingBytes: ringBytes})
		return c, args[2:], err
	}
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: stage, PollInterval: time.Hour})
	return c, args[1:], err
}

func startProducer(t *testing.T, scope string, ringBytes int, key string, n, start int) (*shmtest.Proc, *connector.Descriptor) {
	t.Helper()
	p := shmtest.Start(t, "producer", scope, strconv.Itoa(ringBytes), key, strconv.Itoa(n), strconv.Itoa(start))
	return p, conntest.ParseDescriptor(t, p.Line(t, shmtest.Patience), key)
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
			p.Expect(t, shmtest.Patience, "closed")

			// And the other way round: the parent produces, a child receives.
			sender := conntest.Open(t, s, "0", ringBytes)
			key2 := shmtest.Key("xproc-back")
			conntest.MustPut(t, sender, "0", "1", key2, conntest.Codes(5, 7))
			r := shmtest.Start(t, "receiver", s, key2)
			r.Line(t, shmtest.Patience)
			r.Send(t, "go")
			r.Expect(t, shmtest.Patience, "[7,8,9,10,11]")
			r.Exited(t, shmtest.Patience)
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
				r.Line(t, shmtest.Patience)
			}
			for _, r := range readers {
				r.Send(t, "go")
			}
			var got []string
			for _, r := range readers {
				got = append(got, r.Line(t, shmtest.Patience))
				r.Exited(t, shmtest.Patience)
			}
			misses := 0
			for _, g := range got {
				if g == "miss" {
					misses++
				} else if g != conntest.CodesLine(56, 0) {
					t.Fatalf("a reader got %s", g)
				}
			}
			if misses != 1 {
				t.Fatalf("results %v: want exactly one claim", got)
			}
			if d.HostRing != nil {
				// Readers never unlink a producer's allocation.
				shmtest.AssertPresent(t, scope.Path(d.HostRing.Name))
			} else {
				shmtest.AssertAbsent(t, conntest.KeyFiles(key)...)
			}
		})
	}
}

func TestDeadlineReceiveNeverWaitsForAnotherProcessRingLock(t *testing.T) {
	for _, useDescriptor := range []bool{false, true} {
		sender, receiver := conntest.Edge(t, 4096)
		d := conntest.MustPut(t, sender, "0", "1", "locked", conntest.Codes(3, 0))
		holder := conntest.HoldRing(t, d)
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
	s := conntest.CrashScope(t)
	p, old := startProducer(t, s, ring.DefaultCapacity, "restart", 1, 11)
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	// Attach the live ring without claiming its frame.
	conntest.Missing(t, receiver, "0", "1", "not-published", nil)
	p.Send(t, "exit") // leaves without closing: its frame stays in the ring
	p.Exited(t, shmtest.Patience)
	// Recv (its first try, then its spin with the edge's producers
	// vouched for between tries) does not deliver it either: it waits
	// until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if v, _, err := receiver.Recv(ctx, "0", "restart"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv after the producer died = %v, %v: want the context's deadline", v, err)
	}
	cancel()
	conntest.Missing(t, receiver, "0", "1", "restart", old)
	conntest.Missing(t, receiver, "0", "1", "restart", nil)
	replacement := conntest.Open(t, s, "0", ring.DefaultCapacity)
	conntest.MustPut(t, replacement, "0", "1", "restart", conntest.Codes(1, 22))
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "restart", nil)); got[0] != 22 {
		t.Fatalf("got %v: a dead producer's frame was delivered", got)
	}
	shmtest.Eventually(t, shmtest.Patience, "the watchdog to remove the dead producer's ring", func() bool {
		return shmtest.Absent(scope.Path(old.HostRing.Name))
	})
}

func TestKilledProducerLeavesNoPayloadFiles(t *testing.T) {
	s := conntest.CrashScope(t)
	ringKey, bigKey := shmtest.Key("killed-ring"), shmtest.Key("killed-big")
	p, ringDesc := startProducer(t, s, ring.DefaultCapacity, ringKey, 3, 0)
	p.Send(t, "put "+bigKey+" 200000 0") // 1.6 MB: beyond a quarter of the ring
	if bigDesc := conntest.ParseDescriptor(t, p.Line(t, shmtest.Patience), bigKey); bigDesc.Shm == nil || ringDesc.HostRing == nil {
		t.Fatalf("descriptors %v %v", ringDesc, bigDesc)
	}
	names := scope.New(s)
	files := append(conntest.KeyFiles(bigKey), scope.Path(ringDesc.HostRing.Name), names.MarkerPath(ringDesc.HostRing.Name), names.RingDir())
	shmtest.AssertPresent(t, files...)
	p.Kill()
	// The watchdog removes them all, the ring's marker with the registry
	// stamp update a receiver caches discovery on.
	shmtest.Eventually(t, shmtest.Patience, "the killed producer's files to be removed", func() bool { return shmtest.Absent(files...) })
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	conntest.Missing(t, receiver, "0", "1", ringKey, nil)
}

func TestWakeupEndsABlockedRecv(t *testing.T) {
	for _, ringBytes := range []int{ring.DefaultCapacity, connector.NoRing} {
		s := shmtest.Scope(t)
		key := shmtest.Key("wake")
		r := shmtest.Start(t, "recv", s, key, "60s")
		r.Expect(t, shmtest.Patience, "waiting")
		sender := conntest.Open(t, s, "0", ringBytes)
		// The child's FIFO exists once it said "waiting"; it polls only hourly,
		// so only the put's wakeup can end its Recv before our line timeout.
		conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 42))
		r.Expect(t, shmtest.Patience, "got 42")
		r.Exited(t, shmtest.Patience)
	}
}

// Crash cleanup: what a producer or receiver killed by SIGKILL leaves in
// /dev/shm once its watchdog has run (SPEC §9). Nothing: not its rings and
// their markers, not its pending segments and their lock files, not the
// segment it was writing, not its FIFO, not the directories it made.

// rolePending: scope ringBytes prefix n size. Opens stage 0 and stage 1
// (a receiver with its FIFO) of scope, puts n payloads of size bytes under
// prefix_0 .. prefix_{n-1} on edge 0->1, says "put", and waits to be killed.
func rolePending(args []string) int {
	ringBytes, _ := strconv.Atoi(args[1])
	n, _ := strconv.Atoi(args[3])
	size, _ := strconv.Atoi(args[4])
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "0", HostRingBytes: ringBytes})
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	r, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "1", HostRingBytes: ringBytes})
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	defer r.Close()
	for i := range n {
		if _, _, err := c.Put("0", "1", fmt.Sprintf("%s_%d", args[2], i), make([]byte, size)); err != nil {
			return shmtest.ChildFailed(err)
		}
	}
	shmtest.Say("put")
	shmtest.Hear()
	return 0
}

func TestKilledProcessLeavesNothing(t *testing.T) {
	for _, c := range []struct {
		name      string
		ringBytes int
		n, size   int
	}{
		{"ring", ring.DefaultCapacity, 20, 100},
		{"ring-and-segments", ring.MinCapacity, 50, 2000}, // the ring fills: most go per-key
		{"per-key", connector.NoRing, 50, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := shmtest.Scope(t)
			names := scope.New(s)
			prefix := shmtest.Key("killed")
			p := shmtest.Start(t, "pending", s, strconv.Itoa(c.ringBytes), prefix, strconv.Itoa(c.n), strconv.Itoa(c.size))
			p.Expect(t, shmtest.Patience, "put")
			if len(conntest.Files(names, prefix)) == 0 {
				t.Fatal("the child made no files")
			}
			p.Kill()
			shmtest.Eventually(t, shmtest.Patience, "the killed process's files to be removed", func() bool {
				return len(conntest.Files(names, prefix)) == 0
			})
		})
	}
}

// roleFlood: scope ringBytes prefix size. Puts payloads of size bytes under
// prefix_0, prefix_1, ... on edge 0->1 until killed, saying "putting" once
// the first is published.
func roleFlood(args []string) int {
	ringBytes, _ := strconv.Atoi(args[1])
	size, _ := strconv.Atoi(args[3])
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "0", HostRingBytes: ringBytes})
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	payload := make([]byte, size)
	for i := 0; ; i++ {
		if _, _, err := c.Put("0", "1", fmt.Sprintf("%s_%d", args[2], i), payload); err != nil {
			return shmtest.ChildFailed(err)
		}
		if i == 0 {
			shmtest.Say("putting")
		}
	}
}

// roleSleeper: scope prefix waiters messages. As stage 1 with no polling
// (only wakeups, and the dispatcher's own look before it sleeps, end a
// Recv), each of waiters goroutines receives keys prefix{g}_{j} for j <
// messages in order, checks the value g*messages+j and says "got g j" (or
// "error ..."), then "done".
func roleSleeper(args []string) int {
	c, args, err := openChild("1", args)
	if err != nil {
		return 1
	}
	defer c.Close()
	waiters, _ := strconv.Atoi(args[1])
	messages, _ := strconv.Atoi(args[2])
	shmtest.Say("ready")
	var wg sync.WaitGroup
	for g := range waiters {
		wg.Go(func() {
			for j := range messages {
				v, _, err := c.Recv(context.Background(), "0", sleeperKey(args[0], g, j))
				if err != nil {
					shmtest.Say("error %v", err)
					return
				}
				vals := conntest.ChildCodes(v)
				if want := int64(g*messages + j); len(vals) != 1 || vals[0] != want {
					shmtest.Say("error %d %d: got %v, want %d", g, j, vals, want)
					return
				}
				shmtest.Say("got %d %d", g, j)
			}
		})
	}
	wg.Wait()
	shmtest.Say("done")
	return 0
}

func sleeperKey(prefix string, g, j int) string {
	return prefix + strconv.Itoa(g) + "_" + strconv.Itoa(j)
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
			r.Expect(t, shmtest.Patience, "ready")
			sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
			put := func(g, j int) {
				if j > 0 {
					shmtest.Jitter(50) // vary where the put meets the dispatcher
				}
				conntest.MustPut(t, sender, "0", "1", sleeperKey(prefix, g, j), conntest.Codes(1, int64(g*tc.messages+j)))
			}
			for g := range tc.waiters {
				put(g, 0)
			}
			for range tc.waiters * tc.messages {
				var g, j int
				l := r.Line(t, shmtest.Patience)
				if _, err := fmt.Sscanf(l, "got %d %d", &g, &j); err != nil {
					t.Fatalf("receiver: %s", l)
				}
				if j+1 < tc.messages {
					put(g, j+1)
				}
			}
			if l := r.Line(t, shmtest.Patience); l != "done" {
				t.Fatal(l)
			}
			if err := r.Wait(t, shmtest.Patience); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A producer killed while it writes segments, at whatever point of a put
// the kill lands, leaves nothing: not the segment it was writing, nor any
// lock file. (Before the watchdog learned names before their files, one
// payload-sized segment stayed behind in most of these kills.)
func TestProducerKilledMidPutLeavesNothing(t *testing.T) {
	for i := range 8 {
		s := shmtest.Scope(t)
		names := scope.New(s)
		prefix := shmtest.Key("midput")
		p := shmtest.Start(t, "flood", s, strconv.Itoa(connector.NoRing), prefix, strconv.Itoa(4<<20))
		p.Expect(t, shmtest.Patience, "putting")
		// Let it get some way into later puts: the kill lands wherever it is.
		shmtest.Eventually(t, shmtest.Patience, "a few more puts", func() bool {
			return len(conntest.Files(names, prefix)) >= 2*(1+i%4)
		})
		p.Kill()
		shmtest.Eventually(t, shmtest.Patience, "the killed producer's files to be removed", func() bool {
			return len(conntest.Files(names, prefix)) == 0
		})
	}
}

// The watchdog is told of the FIFOs this process reads, its receivers' own,
// never of another receiver's that this process only writes to.
func TestOnlyOwnFIFOsAreTracked(t *testing.T) {
	s := shmtest.Scope(t)
	names := scope.New(s)
	other := shmtest.Start(t, "recv", s, shmtest.Key("never"), "1h")
	other.Expect(t, shmtest.Patience, "waiting")
	theirs, _ := filepath.Glob(names.WakeDir + "/1_*")
	if len(theirs) != 1 {
		t.Fatalf("the other receiver's FIFOs: %v", theirs)
	}
	// As a producer's Notifier does.
	fd, err := unix.Open(theirs[0], unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if got := connector.ReceiverFIFOs(names.WakeDir); len(got) != 0 {
		t.Fatalf("FIFOs read by this process: %v, want none", got)
	}
	conntest.Open(t, s, "1", connector.NoRing)
	all, _ := filepath.Glob(names.WakeDir + "/1_*")
	got := connector.ReceiverFIFOs(names.WakeDir)
	if len(all) != 2 || len(got) != 1 || got[0] == theirs[0] || !slices.Contains(all, got[0]) {
		t.Fatalf("FIFOs read by this process: %v; all: %v; the other's: %v", got, all, theirs)
	}
	// A receiver that never put anything has a watchdog too, for its FIFO.
	other.Kill()
	shmtest.Eventually(t, shmtest.Patience, "the killed receiver's FIFO to be removed", func() bool { return shmtest.Absent(theirs[0]) })
}
