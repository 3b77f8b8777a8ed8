//go:build linux

package connector_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

// Files anyone can plant in /dev/shm at a key's names (SPEC §6): each is a
// miss for Get and for Recv, logged once by the connector, never an error
// per call; nothing is read through it or removed.

func TestPlantedFileAtAKeyIsAMiss(t *testing.T) {
	cases := []struct {
		name  string
		plant func(t *testing.T, seg, lock string)
		root  bool
	}{
		{"symlink at the segment", func(t *testing.T, seg, lock string) {
			plantSymlink(t, seg)
			shmtest.WriteFile(t, lock, nil)
		}, false},
		{"symlink at the lock file", func(t *testing.T, seg, lock string) {
			shmtest.WriteFile(t, seg, []byte("\xa5bytes"))
			plantSymlink(t, lock)
		}, false},
		{"FIFO at the segment", func(t *testing.T, seg, lock string) {
			shmtest.Mkfifo(t, seg)
		}, false},
		{"another user's segment", func(t *testing.T, seg, lock string) {
			shmtest.Foreign(t, shmtest.WriteFile(t, seg, []byte("\xa5theirs")), shmtest.WriteFile(t, lock, nil))
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root to make a file of another uid")
			}
			receiver, warns := conntest.OpenWarned(t, shmtest.Scope(t), "1", connector.NoRing)
			key := shmtest.Key("planted")
			seg, lock := plantedKeyFiles(t, key)
			c.plant(t, seg, lock)
			for range 3 {
				conntest.Missing(t, receiver, "0", "1", key, nil)
			}
			if n := warns.Count(); n != 1 {
				t.Fatalf("%d warnings after three gets, want one", n)
			}
			shmtest.AssertPresent(t, seg)
		})
	}
}

// A Recv of a key whose name holds a planted symlink keeps waiting, and
// gets the publication once the producer has replaced the link with it.
func TestRecvPastAPlantedSymlink(t *testing.T) {
	s := shmtest.Scope(t)
	sender := conntest.Open(t, s, "0", connector.NoRing)
	receiver, warns := conntest.OpenWarned(t, s, "1", connector.NoRing)
	key := shmtest.Key("planted-recv")
	target := shmtest.WriteFile(t, scope.Path(key)+".target", []byte("\xa5their"))
	t.Cleanup(func() { os.Remove(target); os.Remove(scope.Path(key)) })
	if err := os.Symlink(target, scope.Path(key)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), shmtest.Patience)
	defer cancel()
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, _, err := receiver.Recv(ctx, "0", key)
		done <- result{v, err}
	}()
	shmtest.Eventually(t, shmtest.Patience, "Recv to meet the symlink", func() bool { return warns.Count() > 0 })
	conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 9))
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := conntest.CodesOf(t, r.v); got[0] != 9 {
		t.Fatalf("got %v", got)
	}
	if n := warns.Count(); n != 1 {
		t.Fatalf("%d warnings, want one", n)
	}
	shmtest.AssertPresent(t, target)
}

// nobody is the unprivileged user a root test runs a child as.
const nobody = 65534

// roleAsNobody: scope key... As stage 0 and stage 1 of scope (run as
// another user than the test's), it puts a ring and a per-key payload of
// its own, says "ready", and on "go" checks three times over that each key
// (where the test planted root's 0600 files) is a miss by Get and by Recv,
// never an error, while its own payloads on both paths still arrive, past
// a ring of root's planted in its ring directory. It says "ok" and the
// number of warnings its connectors logged, or what went wrong.
func roleAsNobody(args []string) int {
	s, planted := args[0], args[1:]
	var opened []*connector.SHM
	defer func() {
		for _, c := range opened {
			c.Close()
		}
	}()
	warns := &conntest.Warnings{}
	open := func(stage connector.Stage) (*connector.SHM, error) {
		c, err := connector.Open(connector.Options{WakeupScope: s, StageID: stage, HostRingBytes: hostileRing, PollInterval: time.Hour, Logger: warns.Logger()})
		if err == nil {
			opened = append(opened, c)
		}
		return c, err
	}
	sender, err := open("0")
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	receiver, err := open("1")
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	own := 0
	deliver := func() error {
		for _, n := range []int{ringCodes, keyCodes} {
			own++
			key := "own" + strconv.Itoa(own)
			if _, _, err := sender.Put("0", "1", key, conntest.Codes(n, int64(own))); err != nil {
				return fmt.Errorf("put %s: %w", key, err)
			}
			v, _, ok, err := receiver.Get("0", "1", key, nil)
			if err != nil || !ok {
				return fmt.Errorf("get %s: ok=%v err=%v", key, ok, err)
			}
			if got := conntest.ChildCodes(v); len(got) != n || got[0] != int64(own) {
				return fmt.Errorf("get %s: %d values from %v", key, len(got), got[:1])
			}
		}
		return nil
	}
	if err := deliver(); err != nil { // makes the ring directory too
		return shmtest.ChildFailed(err)
	}
	shmtest.Say("ready")
	shmtest.Hear()
	for range 3 {
		for _, key := range planted {
			if _, _, ok, err := receiver.Get("0", "1", key, nil); ok || err != nil {
				shmtest.Say("get %s: ok=%v err=%v", key, ok, err)
				return 0
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, _, err := receiver.Recv(ctx, "0", key)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				shmtest.Say("recv %s: %v", key, err)
				return 0
			}
		}
		if err := deliver(); err != nil {
			shmtest.Say("%v", err)
			return 0
		}
	}
	shmtest.Say("ok %d", warns.Count())
	return 0
}

// Another user's process (a child as nobody) meets root's 0600 files at a
// key's names and a root ring in its ring directory: opening them fails
// with EACCES, which is a miss or a contained fault, never an error per
// call, and said once each; its own payloads keep arriving on both paths.
func TestOtherUsersFilesUnopenable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another user")
	}
	s := shmtest.Scope(t)
	names := scope.ForUID(nobody, s, 0)
	bothRoot, rootLock, lockOnly := shmtest.Key("rootboth"), shmtest.Key("rootlock"), shmtest.Key("lockonly")
	var planted []string
	t.Cleanup(func() {
		for _, p := range planted {
			os.Remove(p)
		}
		os.Remove(names.RingDir())
		shmtest.AssertAbsent(t, names.RingDir(), names.WakeDir)
	})
	plant := func(path string, data []byte, uid int) {
		planted = append(planted, shmtest.WriteFile(t, path, data))
		if err := os.Lchown(path, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	child := shmtest.StartAs(t, &syscall.Credential{Uid: nobody, Gid: nobody}, "asnobody", s, bothRoot, rootLock, lockOnly)
	if l := child.Line(t, shmtest.Patience); l != "ready" {
		t.Fatalf("child: %s", l)
	}
	plant(scope.Path(bothRoot), []byte("\xa5root's"), 0)
	plant(scope.Path(scope.LockName(bothRoot)), nil, 0)
	plant(scope.Path(rootLock), []byte("\xa5nobody's"), nobody)
	plant(scope.Path(scope.LockName(rootLock)), nil, 0)
	plant(scope.Path(scope.LockName(lockOnly)), nil, 0)
	id, err := scope.NewID()
	if err != nil {
		t.Fatal(err)
	}
	rootRing := names.RingName("0", "1", os.Getpid(), id)
	plant(scope.Path(rootRing), make([]byte, 4096), 0)
	plant(names.MarkerPath(rootRing), nil, 0)
	child.Send(t, "go")
	// Two warnings: one for the files at keys, one for the ring, rejected
	// once and not tried again.
	if l := child.Line(t, shmtest.Patience); l != "ok 2" {
		t.Fatalf("child: %s, want ok and two warnings", l)
	}
	if err := child.Wait(t, shmtest.Patience); err != nil {
		t.Fatal(err)
	}
}

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
		d, ok, err := planter.Put("0", "1", "planted", ring.KindBytes, 4, func(dst []byte) error { return nil })
		if !ok || err != nil {
			tb.Fatalf("plant: ok=%v err=%v", ok, err)
		}
		f, err := os.OpenFile(scope.Path(d.Name), os.O_RDWR, 0)
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
			receiver, warns := conntest.OpenWarned(t, s, "1", hostileRing)
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
			if n := warns.Count(); n != 1 {
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
	ctx, cancel := context.WithTimeout(context.Background(), shmtest.Patience)
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
		return shmtest.ChildFailed(err)
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
				return shmtest.ChildFailed(err)
			}
			if _, _, err := c.Put("0", "1", args[1]+"_k"+strconv.Itoa(j), conntest.Codes(keyCodes, int64(j))); err != nil {
				return shmtest.ChildFailed(err)
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
			receiver, _ := conntest.OpenWarned(b, s, "1", hostileRing)
			prefix := shmtest.Key("hostile")
			p := shmtest.Start(b, "batchproducer", s, prefix)
			if l := p.Line(b, shmtest.Patience); l != "ready" {
				b.Fatal(l)
			}
			b.Cleanup(func() { p.Send(b, "exit"); p.Wait(b, shmtest.Patience) })
			i := 0
			start := shmtest.CPUTime(b)
			for b.Loop() {
				p.Send(b, "put "+strconv.Itoa(i))
				if l := p.Line(b, shmtest.Patience); l != "ok" {
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
			b.ReportMetric(float64(shmtest.CPUTime(b)-start)/float64(2*batch*i), "cpu-ns/payload")
		})
	}
}
