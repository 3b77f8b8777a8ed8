package ring

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/internal/shmtest"
)

func noCopy(kind Kind, payload []byte) (any, error) { return nil, nil }

// BenchmarkPutGet is one put and one claim of a 500-byte payload, producer
// and receiver in one process (two Transports, as two stages would be).
func BenchmarkPutGet(b *testing.B) {
	sc := shmtest.Scope(b)
	p, r := newTransport(b, sc, 4<<20), newTransport(b, sc, 4<<20)
	payload := bytes.Repeat([]byte{7}, 500)
	write := func(dst []byte) error { copy(dst, payload); return nil }
	out := make([]byte, 500)
	decode := func(kind Kind, src []byte) (any, error) { copy(out, src); return nil, nil }
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "req_" + strconv.Itoa(i)
	}
	if _, ok, _ := p.Put("0", "1", keys[0], KindBytes, 500, write); !ok {
		b.Fatal("put refused")
	}
	if _, _, ok, _ := r.Get("0", "1", keys[0], nil, decode); !ok {
		b.Fatal("get missed")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		key := keys[i%len(keys)]
		if _, ok, err := p.Put("0", "1", key, KindBytes, 500, write); !ok || err != nil {
			b.Fatal("put refused", err)
		}
		if _, _, ok, err := r.Get("0", "1", key, nil, decode); !ok || err != nil {
			b.Fatal("get missed", err)
		}
	}
}

// BenchmarkGetMiss is an empty poll of an attached, unchanged edge: no lock,
// no scan, no system call (TestEmptyPollNeitherScansNorLocks counts them).
func BenchmarkGetMiss(b *testing.B) {
	for _, watched := range []bool{true, false} {
		b.Run(fmt.Sprintf("watcher=%v", watched), func(b *testing.B) {
			defer setWatcher(watched)()
			sc := shmtest.Scope(b)
			p, r := newTransport(b, sc, 4096), newTransport(b, sc, 4096)
			mustPut(b, p, "0", "1", "prime", []byte{1})
			mustGet(b, r, "0", "1", "prime", nil)
			shmtest.Eventually(b, shmtest.Patience, "a quiet miss", func() bool {
				w := r.work()
				r.Get("0", "1", "missing", nil, noCopy)
				return r.work() == w || !watched
			})
			before := r.work()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, _, ok, _ := r.Get("0", "1", "missing", nil, noCopy); ok {
					b.Fatal("hit")
				}
			}
			b.StopTimer()
			after := r.work()
			b.ReportMetric(float64(after.flocks-before.flocks)/float64(b.N), "flocks/op")
			b.ReportMetric(float64(after.stats-before.stats)/float64(b.N), "stats/op")
		})
	}
}

// BenchmarkGetMissNoProducerYet is an empty poll before any producer of the
// scope has made the ring directory: one stat per miss (SPEC §7), nothing
// else.
func BenchmarkGetMissNoProducerYet(b *testing.B) {
	r := newTransport(b, shmtest.Scope(b), 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok, err := r.Get("0", "1", "missing", nil, noCopy); ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkCrossProcess is the latency from Put in this process to a
// polling receiver process claiming the frame (p50/p99 reported).
func BenchmarkCrossProcess(b *testing.B) {
	sc := shmtest.Scope(b)
	p := newTransport(b, sc, 4<<20)
	child := shmtest.Start(b, "echoer", sc)
	if l := child.Line(b, shmtest.Patience); l != "ready" {
		b.Fatalf("child: %q", l)
	}
	payload := bytes.Repeat([]byte{7}, 500)
	r := newTransport(b, sc, 4<<20)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		key := "x" + strconv.Itoa(i)
		start := time.Now()
		binary := time.Now().UnixNano()
		copy(payload, strconv.FormatInt(binary, 10))
		mustPut(b, p, "0", "1", key, payload)
		// the child echoes the frame back on edge 1->0; wait for it here
		for {
			if _, _, ok, err := r.Get("1", "0", key, nil, noCopy); err != nil {
				b.Fatal(err)
			} else if ok {
				break
			}
		}
		lat = append(lat, time.Since(start)/2)
	}
	b.StopTimer()
	child.Send(b, "stop")
	child.Wait(b, shmtest.Patience)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// roleEchoer claims every frame on edge 0->1 and puts it back on 1->0
// under the same key, until told to stop.
func roleEchoer(args []string) int {
	p, err := New(Options{Names: scopeNames(args[0]), Capacity: 4 << 20})
	if err != nil {
		return 1
	}
	defer p.Close()
	stop := make(chan struct{})
	shmtest.Say("ready")
	go func() { shmtest.Hear(); close(stop) }()
	buf := make([]byte, 4096)
	for i := 0; ; {
		select {
		case <-stop:
			return 0
		default:
		}
		key := "x" + strconv.Itoa(i)
		v, _, ok, err := p.Get("0", "1", key, nil, func(kind Kind, b []byte) (any, error) { return copy(buf, b), nil })
		if err != nil {
			return 1
		}
		if ok {
			n := v.(int)
			if _, ok, _ := p.Put("1", "0", key, KindBytes, n, func(dst []byte) error { copy(dst, buf[:n]); return nil }); !ok {
				return 1
			}
			i++
		}
	}
}

// BenchmarkFlockBaseline is one LOCK_EX + LOCK_UN pair on a /dev/shm file:
// the unit in which the ring's costs are reported (a put+get pair makes
// two such pairs plus one pidfd poll).
func BenchmarkFlockBaseline(b *testing.B) {
	path := "/dev/shm/" + shmtest.Key("flock")
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Unlink(path)
	defer unix.Close(fd)
	b.ReportAllocs()
	for range b.N {
		unix.Flock(fd, unix.LOCK_EX)
		unix.Flock(fd, unix.LOCK_UN)
	}
}
