//go:build linux

package connector_test

import (
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
			payload := tc.payload
			key := shmtest.Key("pair")
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := c.Put("0", "1", key, payload); err != nil {
					b.Fatal(err)
				}
				if _, _, ok, err := c.Get("0", "1", key, nil); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
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
	s := shmtest.Scope(b)
	c := conntest.Open(b, s, connector.NoStage, ring.DefaultCapacity)
	values := make([]float32, 128)
	tt, err := tensor.FromSlice(values, len(values))
	if err != nil {
		b.Fatal(err)
	}
	payload := map[string]any{"data": tt}
	path := scope.Path(shmtest.Key("flock"))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Unlink(path)
	defer unix.Close(fd)
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = shmtest.Key("pair" + strconv.Itoa(i))
	}
	var pairs, floors []time.Duration
	i := 0
	for b.Loop() {
		k := keys[i%len(keys)]
		i++
		t0 := time.Now()
		if _, _, err := c.Put("0", "1", k, payload); err != nil {
			b.Fatal(err)
		}
		if _, _, ok, err := c.Get("0", "1", k, nil); !ok || err != nil {
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
