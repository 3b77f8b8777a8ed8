//go:build linux

package connector_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/connector"
	"omnishm/frame"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/tensor"
	"omnishm/wake"
)

// BenchmarkPutGetPair is the transport's CPU cost: one put and one get of
// {"codes": int64[56]} in one process (SPEC target: under 2 µs on the ring).
// "ring-plain" is a tensor-free payload (64 token ids): kind-0 bytes.
func BenchmarkPutGetPair(b *testing.B) {
	ids := make([]any, 64)
	for i := range ids {
		ids[i] = int64(i * 1000)
	}
	for _, tc := range []struct {
		name      string
		stage     connector.Stage
		ringBytes int
		payload   any
	}{
		{"ring", "1", ring.DefaultCapacity, conntest.Codes(56, 0)},
		{"ring-plain", "1", ring.DefaultCapacity, map[string]any{"ids": ids}},
		// As `omnishm bench --mode pair`: no receiver of the stage anywhere.
		{"ring-nostage", connector.NoStage, ring.DefaultCapacity, conntest.Codes(56, 0)},
		{"perkey", "1", connector.NoRing, conntest.Codes(56, 0)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := shmtest.Scope(b)
			c := conntest.Open(b, s, tc.stage, tc.ringBytes)
			conntest.PutGetLoop(b, c, c, shmtest.Key("pair"), tc.payload)
		})
	}
}

// BenchmarkGetMiss is an empty poll of an edge with an attached ring: the
// ring part takes no lock, scan or syscall; the per-key check is one stat.
func BenchmarkGetMiss(b *testing.B) {
	s := shmtest.Scope(b)
	sender, receiver := conntest.Open(b, s, "0", ring.DefaultCapacity), conntest.Open(b, s, "1", ring.DefaultCapacity)
	if _, _, err := sender.Put("0", "1", "prime", conntest.Codes(3, 0)); err != nil {
		b.Fatal(err)
	}
	if _, _, ok, _ := receiver.Get("0", "1", "prime", nil); !ok {
		b.Fatal("prime not received")
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok, err := receiver.Get("0", "1", "missing", nil); ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkPairFlockRatio times a ring put+get pair of a 512-byte tensor
// (as `omnishm bench --mode pair`: no receiver of the stage) and two
// uncontended flock pairs on a /dev/shm file, alternately, so both meet the
// same load; it reports each p50 and their ratio (issue target: at most 2).
func BenchmarkPairFlockRatio(b *testing.B) {
	pairFlockRatio(b, func(c *connector.SHM, k string) (bool, error) {
		_, _, ok, err := c.Get("0", "1", k, nil)
		return ok, err
	})
}

// BenchmarkPairFlockRatioInto is BenchmarkPairFlockRatio with the get
// decoding into a recycled buffer (GetInto, a frame.Arena): the pair
// without the allocation of the tensor's data, so the two tell what the
// decoded payload's memory costs of the ratio.
func BenchmarkPairFlockRatioInto(b *testing.B) {
	buf := make([]byte, 4096)
	var arena frame.Arena
	pairFlockRatio(b, func(c *connector.SHM, k string) (bool, error) {
		arena.Reset(buf)
		_, ok, err := c.GetInto("0", "1", k, nil, &arena)
		return ok, err
	})
}

func pairFlockRatio(b *testing.B, get func(c *connector.SHM, key string) (bool, error)) {
	s := shmtest.Scope(b)
	c := conntest.Open(b, s, connector.NoStage, ring.DefaultCapacity)
	values := make([]float32, 128)
	tt, err := tensor.FromSlice(values, len(values))
	if err != nil {
		b.Fatal(err)
	}
	payload := map[string]any{"data": tt}
	fd := flockFile(b)
	// A key per pair, as the bench's: a put of a key the connector
	// published before also asks whether that one was claimed.
	prefix := shmtest.Key("pair")
	var pairs, floors []time.Duration
	i := 0
	for b.Loop() {
		k := prefix + strconv.Itoa(i)
		i++
		t0 := time.Now()
		if _, _, err := c.Put("0", "1", k, payload); err != nil {
			b.Fatal(err)
		}
		if ok, err := get(c, k); !ok || err != nil {
			b.Fatal(ok, err)
		}
		t1 := time.Now()
		for range 2 {
			unix.Flock(fd, unix.LOCK_EX)
			unix.Flock(fd, unix.LOCK_UN)
		}
		t2 := time.Now()
		pairs, floors = append(pairs, t1.Sub(t0)), append(floors, t2.Sub(t1))
	}
	slices.Sort(pairs)
	slices.Sort(floors)
	p, f := pairs[len(pairs)/2], floors[len(floors)/2]
	b.ReportMetric(float64(p.Nanoseconds()), "pair-p50-ns")
	b.ReportMetric(float64(f.Nanoseconds()), "flock-p50-ns")
	b.ReportMetric(float64(p)/float64(f), "flock-ratio")
}

// roleFanoutProducer: scope ringBytes. Puts conntest.Codes(1, V) under KEY
// on edge 0->1 for each line "KEY V" it reads, saying nothing; for a line
// "wake" it only wakes stage 2 (the measurement's floor); it leaves on an
// empty line or when the parent is gone.
func roleFanoutProducer(args []string) int {
	ringBytes, _ := strconv.Atoi(args[1])
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "0", HostRingBytes: ringBytes})
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	defer c.Close()
	n := wake.NewNotifier(c.Names().WakeDir)
	defer n.Close()
	for {
		var key string
		var v int64
		line := shmtest.Hear()
		if line == "wake" {
			n.Notify("2")
			continue
		}
		if n, _ := fmt.Sscan(line, &key, &v); n != 2 {
			return 0
		}
		if _, _, err := c.Put("0", "1", key, conntest.Codes(1, v)); err != nil {
			return shmtest.ChildFailed(err)
		}
	}
}

// flockFile is a new file of the test's own in /dev/shm, open for flock
// pairs (the unit the per-message budget is written in); it is
// closed and unlinked when the benchmark ends.
func flockFile(tb testing.TB) int {
	path := scope.Path(shmtest.Key("flock"))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		unix.Close(fd)
		unix.Unlink(path)
	})
	return fd
}

// flockPair is the CPU cost of one uncontended LOCK_EX/LOCK_UN pair on a
// /dev/shm file.
func flockPair(tb testing.TB) time.Duration {
	fd := flockFile(tb)
	const pairs = 20000
	start := shmtest.CPUTime(tb)
	for range pairs {
		unix.Flock(fd, unix.LOCK_EX)
		unix.Flock(fd, unix.LOCK_UN)
	}
	return (shmtest.CPUTime(tb) - start) / pairs
}

// BenchmarkFanout measures the receive path at scale as a user meets it:
// N goroutines of this process wait in Recv on N distinct keys of edge
// 0->1 while a producer process puts those keys one at a time, each put
// only once the previous key was delivered. It reports the idle CPU (% of
// one core) and OS threads with all N waiting and nothing arriving, and the
// CPU of this process per delivered message, also in uncontended flock
// pairs measured in the same run, and the floor of that round trip (the
// same line to the producer answered by a bare wakeup). Run with
// -benchtime=1x: each run is one
// measurement; the idle window is a measurement interval, not a wait for a
// condition.
func BenchmarkFanout(b *testing.B) {
	idle := 2 * time.Second
	if s := os.Getenv("OMNISHM_FANOUT_IDLE"); s != "" {
		idle, _ = time.ParseDuration(s)
	}
	for _, rc := range []struct {
		name  string
		bytes int
	}{{"ring", ring.DefaultCapacity}, {"per-key", connector.NoRing}} {
		for _, n := range []int{50, 1000} {
			b.Run(fmt.Sprintf("%s/waiters=%d", rc.name, n), func(b *testing.B) {
				for b.Loop() {
					measureFanout(b, n, rc.bytes, idle)
				}
			})
		}
	}
}

func measureFanout(b *testing.B, n, ringBytes int, idle time.Duration) {
	sc := conntest.CrashScope(b, shmtest.Prefix())
	recv := conntest.Open(b, sc, "1", ringBytes)
	p := shmtest.Start(b, "fanout", sc, strconv.Itoa(ringBytes))
	defer p.Send(b, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// One delivery first, so the producer's ring exists and is attached.
	prime := shmtest.Key("prime")
	p.Send(b, prime+" 1")
	if _, _, err := recv.Recv(ctx, "0", prime); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	got := make([]chan int64, n)
	for i := range n {
		keys[i], got[i] = shmtest.Key("fan"), make(chan int64, 1)
		go func() {
			v, _, err := recv.Recv(ctx, "0", keys[i])
			if err != nil {
				b.Error(err)
				got[i] <- -1
				return
			}
			got[i] <- conntest.CodesOf(b, v)[0]
		}()
	}
	shmtest.Eventually(b, shmtest.Patience, "every goroutine to reach its wait", func() bool { return recv.Waiting() == n })
	time.Sleep(idle / 4) // settle: the safety re-poll backs off before the measured window
	c0, w0 := shmtest.CPUTime(b), time.Now()
	time.Sleep(idle)
	idleCPU := float64(shmtest.CPUTime(b)-c0) / float64(time.Since(w0))
	th := shmtest.Threads(b)

	c0 = shmtest.CPUTime(b)
	for i := range n {
		p.Send(b, keys[i]+" "+strconv.Itoa(i+1000))
		if v := <-got[i]; v != int64(i+1000) {
			b.Fatalf("waiter %d got %d", i, v)
		}
	}
	perMsg := (shmtest.CPUTime(b) - c0) / time.Duration(n)

	// The floor of this round trip: the same line to the producer, which
	// then only writes a wakeup to a FIFO of this process, read through
	// the runtime poller.
	r, err := wake.OpenReceiver(recv.Names().WakeDir, "2")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	woken := r.C()
	p.Send(b, "wake") // the child's notifier finds the new FIFO
	<-woken
	c0 = shmtest.CPUTime(b)
	for range n {
		p.Send(b, "wake")
		<-woken
	}
	floor := (shmtest.CPUTime(b) - c0) / time.Duration(n)
	pair := flockPair(b)
	b.ReportMetric(100*idleCPU, "idle-cpu-%")
	b.ReportMetric(float64(th), "threads")
	b.ReportMetric(float64(perMsg.Nanoseconds())/1000, "cpu-µs/msg")
	b.ReportMetric(float64(perMsg)/float64(pair), "flock-pairs/msg")
	b.ReportMetric(float64(floor.Nanoseconds())/1000, "floor-cpu-µs/msg")
	b.ReportMetric(float64(perMsg-floor)/float64(pair), "above-floor-flock-pairs/msg")
}

// BenchmarkLargePair is one put and one get of a float32 tensor of 64 KiB,
// 1 MiB and 16 MiB in one process, on the ring (a 64 MiB one, so 1 MiB
// fits its quarter) and on the per-key path, with Get or with GetInto
// into one recycled buffer: the copy paths' cost. SetBytes counts the
// payload once; two plain copies of it are the floor.
func BenchmarkLargePair(b *testing.B) {
	for _, path := range []struct {
		name      string
		ringBytes int
		into      bool
	}{{"ring", ring.MaxCapacity, false}, {"ring-into", ring.MaxCapacity, true},
		{"perkey", connector.NoRing, false}, {"perkey-into", connector.NoRing, true}} {
		for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
			b.Run(path.name+"/"+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
				c := conntest.Open(b, shmtest.Scope(b), "1", path.ringBytes)
				t, err := tensor.Zeros(tensor.Float32, size/4)
				if err != nil {
					b.Fatal(err)
				}
				payload := map[string]any{"hidden": t}
				key := shmtest.Key("large")
				// The first put creates (and zero-fills) the ring: not timed.
				if _, _, err := c.Put("0", "1", key, payload); err != nil {
					b.Fatal(err)
				}
				if _, _, ok, err := c.Get("0", "1", key, nil); !ok || err != nil {
					b.Fatal(ok, err)
				}
				buf := make([]byte, size+4096) // the tensor, or the whole segment
				var arena frame.Arena
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := c.Put("0", "1", key, payload); err != nil {
						b.Fatal(err)
					}
					var ok bool
					var err error
					if path.into {
						arena.Reset(buf)
						_, ok, err = c.GetInto("0", "1", key, nil, &arena)
					} else {
						_, _, ok, err = c.Get("0", "1", key, nil)
					}
					if !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
			})
		}
	}
}
