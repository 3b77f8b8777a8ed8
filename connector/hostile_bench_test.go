//go:build linux

package connector_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

// hostileRing is the ring capacity of the edges hostile files are planted
// next to; per-key payloads are larger than a quarter of it.
const hostileRing = 1 << 16

// hostile is a file anyone may plant next to a live edge 0->1 of scope s:
// plant makes it and returns the key it sits at (a key no legitimate
// producer puts), removing it when the test ends.
type hostile struct {
	name  string
	root  bool // needs root, to make a file of another uid
	plant func(tb testing.TB, s string) string
}

// hostiles are the files of issue 11 ("hostile files contained"): rings
// whose creator is alive (this process) with corrupt frames or a bad
// magic, another user's segment and lock file, and symlinks at a segment's
// and a lock file's name.
var hostiles = []hostile{
	{"ring frame size not a multiple of 16", false, corruptRing(ring.HeaderSize, binary.LittleEndian.AppendUint32(nil, 40))},
	{"ring frame past the capacity", false, corruptRing(ring.HeaderSize, binary.LittleEndian.AppendUint32(nil, 1<<30))},
	{"ring key past its frame", false, corruptRing(ring.HeaderSize+10, []byte{0xff, 0xff})},
	{"ring bad magic", false, corruptRing(0, []byte("NOTARING"))},
	{"another user's segment and lock file", true, func(tb testing.TB, s string) string {
		key := shmtest.Key("planted")
		seg, lock := plantedKeyFiles(tb, key)
		shmtest.Foreign(tb, shmtest.WriteFile(tb, seg, []byte("\xa5theirs")), shmtest.WriteFile(tb, lock, nil))
		return key
	}},
	{"symlink at the segment", false, func(tb testing.TB, s string) string {
		key := shmtest.Key("planted")
		seg, lock := plantedKeyFiles(tb, key)
		plantSymlink(tb, seg)
		shmtest.WriteFile(tb, lock, nil)
		return key
	}},
	{"symlink at the lock file", false, func(tb testing.TB, s string) string {
		key := shmtest.Key("planted")
		seg, lock := plantedKeyFiles(tb, key)
		shmtest.WriteFile(tb, seg, []byte("\xa5bytes"))
		plantSymlink(tb, lock)
		return key
	}},
}

// corruptRing plants a ring of its own producer (alive: this process) on
// edge 0->1 holding one frame of key "planted", then writes b at offset off
// of its file.
func corruptRing(off int64, b []byte) func(tb testing.TB, s string) string {
	return func(tb testing.TB, s string) string {
		tb.Helper()
		names := scope.New(s)
		planter, err := ring.New(ring.Options{Names: names, Capacity: hostileRing})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { planter.Close() })
		if _, ok, err := planter.Put("0", "1", "planted", ring.KindBytes, 4, func(dst []byte) error { return nil }); !ok || err != nil {
			tb.Fatalf("plant: ok=%v err=%v", ok, err)
		}
		planted, _ := filepath.Glob(scope.Path(names.EdgePrefix("0", "1")) + "*")
		if len(planted) != 1 {
			tb.Fatalf("rings %v, want the planted one", planted)
		}
		f, err := os.OpenFile(planted[0], os.O_RDWR, 0)
		if err != nil {
			tb.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, off); err != nil {
			tb.Fatal(err)
		}
		return "planted"
	}
}

// plantedKeyFiles are key's segment and lock file paths, removed when the
// test ends.
func plantedKeyFiles(tb testing.TB, key string) (seg, lock string) {
	seg, lock = scope.Path(key), scope.Path(scope.LockName(key))
	tb.Cleanup(func() { os.Remove(seg); os.Remove(lock) })
	return seg, lock
}

// plantSymlink makes at a symlink to a file of bytes beside it.
func plantSymlink(tb testing.TB, at string) {
	tb.Helper()
	target := shmtest.WriteFile(tb, at+".target", []byte("\xa5their"))
	tb.Cleanup(func() { os.Remove(target) })
	if err := os.Symlink(target, at); err != nil {
		tb.Fatal(err)
	}
}

// With each hostile file planted next to a live edge, the legitimate
// producer's payloads keep arriving on both paths, ring and per key, by Get
// and by Recv; the planted key is a miss; the connector warns once.
func TestHostileFilesNextToALiveEdge(t *testing.T) {
	for _, h := range hostiles {
		t.Run(h.name, func(t *testing.T) {
			if h.root && os.Geteuid() != 0 {
				t.Skip("needs root to make a file of another uid")
			}
			s := shmtest.Scope(t)
			planted := h.plant(t, s)
			sender := conntest.Open(t, s, "0", hostileRing)
			receiver, warns := openWarned(t, s, "1", hostileRing)
			for i := range 10 {
				for _, n := range []int{4, hostileRing} { // the ring, then per key
					key := shmtest.Key("k" + strconv.Itoa(i) + "_" + strconv.Itoa(n))
					conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(n, int64(i)))
					checkCodes(t, conntest.MustGet(t, receiver, "0", "1", key, nil), n, int64(i))
					key += "r"
					conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(n, int64(i)))
					checkCodes(t, mustRecv(t, receiver, key), n, int64(i))
				}
				conntest.Missing(t, receiver, "0", "1", planted, nil)
			}
			if n := warns.n.Load(); n != 1 {
				t.Fatalf("%d warnings, want one", n)
			}
		})
	}
}

// checkCodes fails the test unless v is conntest.Codes(n, start).
func checkCodes(tb testing.TB, v any, n int, start int64) {
	tb.Helper()
	got := conntest.CodesOf(tb, v)
	if len(got) != n || got[0] != start || got[n-1] != start+int64(n-1) {
		tb.Fatalf("got %d values from %v, want %d from %d", len(got), got[:min(len(got), 1)], n, start)
	}
}

func mustRecv(tb testing.TB, c *connector.SHM, key string) any {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	v, _, err := c.Recv(ctx, "0", key)
	if err != nil {
		tb.Fatalf("recv %s: %v", key, err)
	}
	return v
}

// Payloads of the hostile benchmark: ringCodes values fit the ring,
// keyCodes values (32 KiB) take the per-key path.
const (
	ringCodes = 16
	keyCodes  = 4096
	batch     = 16
)

// roleBatchProducer: scope prefix. As stage 0 with a ring of hostileRing
// bytes, for each line "put I" it puts on edge 0->1, for j < batch,
// prefix_r{I*batch+j} = Codes(ringCodes, I*batch+j) (the ring) and
// prefix_k{I*batch+j} = Codes(keyCodes, ...) (per key), then says "ok".
func roleBatchProducer(args []string) int {
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "0", HostRingBytes: hostileRing})
	if err != nil {
		return childFailed(err)
	}
	defer c.Close()
	shmtest.Say("ready")
	for {
		var cmd string
		var i int
		if fmt.Sscan(shmtest.Hear(), &cmd, &i); cmd != "put" {
			return 0
		}
		for j := i * batch; j < (i+1)*batch; j++ {
			if _, _, err := c.Put("0", "1", args[1]+"_r"+strconv.Itoa(j), conntest.Codes(ringCodes, int64(j))); err != nil {
				return childFailed(err)
			}
			if _, _, err := c.Put("0", "1", args[1]+"_k"+strconv.Itoa(j), conntest.Codes(keyCodes, int64(j))); err != nil {
				return childFailed(err)
			}
		}
		shmtest.Say("ok")
	}
}

// BenchmarkHostileEdge is the receiver's CPU per delivered payload on an
// edge 0->1 whose producer is another process, clean and with each hostile
// file planted next to it (issue 11: within 2x of clean). Each op is one
// batch: the producer puts batch ring payloads and batch per-key ones, then
// the receiver (this process) takes half of each by Get and half by Recv,
// checks every value, and gets the planted key (a miss; on the clean edge a
// key nothing is at). cpu-ns/payload is getrusage of this process, which
// only receives. Compare the clean case of the same run:
//
//	go test ./connector -run '^$' -bench HostileEdge -count 6
func BenchmarkHostileEdge(b *testing.B) {
	clean := hostile{name: "clean", plant: func(testing.TB, string) string { return shmtest.Key("nothing") }}
	for _, h := range slices.Concat([]hostile{clean}, hostiles) {
		b.Run(h.name, func(b *testing.B) {
			if h.root && os.Geteuid() != 0 {
				b.Skip("needs root to make a file of another uid")
			}
			s := shmtest.Scope(b)
			planted := h.plant(b, s)
			receiver, _ := openWarned(b, s, "1", hostileRing)
			prefix := shmtest.Key("hostile")
			p := shmtest.Start(b, "batchproducer", s, prefix)
			if l := p.Line(b, wait); l != "ready" {
				b.Fatal(l)
			}
			b.Cleanup(func() { p.Send(b, "exit"); p.Wait(b, wait) })
			i := 0
			start := cpuTime(b)
			for b.Loop() {
				p.Send(b, "put "+strconv.Itoa(i))
				if l := p.Line(b, wait); l != "ok" {
					b.Fatal(l)
				}
				for j := i * batch; j < (i+1)*batch; j++ {
					take := func(key string) any { return conntest.MustGet(b, receiver, "0", "1", key, nil) }
					if j%2 == 1 {
						take = func(key string) any { return mustRecv(b, receiver, key) }
					}
					checkCodes(b, take(prefix+"_r"+strconv.Itoa(j)), ringCodes, int64(j))
					checkCodes(b, take(prefix+"_k"+strconv.Itoa(j)), keyCodes, int64(j))
				}
				conntest.Missing(b, receiver, "0", "1", planted, nil)
				i++
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(2*batch*i), "cpu-ns/payload")
		})
	}
}
