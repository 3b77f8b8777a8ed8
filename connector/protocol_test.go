//go:build linux

package connector_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/tensor"
	"omnishm/wire"
)

// Protocol breaks (SPEC §3, §7) that an implementation could make and still
// move payloads in the common case. Each test here fails if the ring makes
// the break named in its comment; they go through the connector's and the
// ring's exported API only, and ring files only as a peer sees them.

// frameBytes is what every frame of a lap takes in the ring: it divides the
// capacity, so the frame capacity/frameBytes puts after another lands at the
// same ring offset, one lap later, at a position capacity bytes further.
const (
	frameBytes = 256
	lapBytes   = ring.MinCapacity
)

// lap is an edge 0->1 whose puts all make frames of frameBytes.
type lap struct {
	t      *testing.T
	scope  string
	sender *connector.SHM
	n      atomic.Int64
	size   int // payload bytes whose kind-0 form fills a frame with a lap key
}

func newLap(t *testing.T) *lap {
	t.Helper()
	l := &lap{t: t, scope: shmtest.Scope(t)}
	l.sender = conntest.Open(t, l.scope, "0", lapBytes)
	// 16-byte frame header + key + kind-0 bytes == frameBytes.
	want := frameBytes - 16 - len(l.key())
	for n := range want {
		if b, _ := wire.Marshal(make([]byte, n)); len(b) == want {
			l.size = n
			return l
		}
	}
	t.Fatalf("no payload size makes a %d-byte frame", frameBytes)
	return nil
}

// key returns a new key of the one length every key of the lap has.
func (l *lap) key() string { return fmt.Sprintf("%s_lap_%08d", shmtest.Prefix(), l.n.Add(1)) }

func (l *lap) receiver() *connector.SHM { return conntest.Open(l.t, l.scope, "1", lapBytes) }

// put publishes a payload of bytes all equal to fill under key, in the ring.
func (l *lap) put(key string, fill byte) connector.Descriptor {
	l.t.Helper()
	d := conntest.MustPut(l.t, l.sender, "0", "1", key, bytes.Repeat([]byte{fill}, l.size))
	if d.HostRing == nil {
		l.t.Fatalf("put %s took %v, want the ring", key, d)
	}
	return d
}

// sameOffsetLater reports whether ring publication a is at b's offset in
// the buffer, a lap or more later (a put into an empty ring rewinds to the
// buffer's start: fill's puts each start a lap).
func sameOffsetLater(a, b connector.Descriptor) bool {
	return a.HostRing.Position > b.HostRing.Position && a.HostRing.Position%lapBytes == b.HostRing.Position%lapBytes
}

// fill puts and claims n frames, moving the ring's head n frames on, or
// more.
func (l *lap) fill(r *connector.SHM, n int) {
	l.t.Helper()
	for range n {
		k := l.key()
		l.put(k, 0xf0)
		conntest.MustGet(l.t, r, "0", "1", k, nil)
	}
}

// fillOf returns the byte a lap payload was made of.
func fillOf(t *testing.T, v any) byte {
	t.Helper()
	b, ok := v.([]byte)
	if !ok || len(b) == 0 || bytes.Count(b, b[:1]) != len(b) {
		t.Fatalf("payload %T %v is not a lap payload", v, v)
	}
	return b[0]
}

// lapVersion says which lap payload v is, for messages.
func lapVersion(v any) string {
	if b, ok := v.([]byte); ok && len(b) > 0 && bytes.Count(b, b[:1]) == len(b) {
		return fmt.Sprintf("version %d", b[0])
	}
	return fmt.Sprintf("%T", v)
}

// Break: a descriptor is matched by ring offset rather than by monotonic
// position, so a stale one reads the newer publication that a wrap put at
// the same offset.
func TestStaleDescriptorNeverReadsALaterLap(t *testing.T) {
	l := newLap(t)
	r := l.receiver()
	key := l.key()
	old := l.put(key, 1)
	if got := fillOf(t, conntest.MustGet(t, r, "0", "1", key, &old)); got != 1 {
		t.Fatalf("got version %d", got)
	}
	l.fill(r, lapBytes/frameBytes-1)
	newer := l.put(key, 2)
	if !sameOffsetLater(newer, old) {
		t.Fatalf("setup: the new version is at %d, want a later lap than %d", newer.HostRing.Position, old.HostRing.Position)
	}
	conntest.Missing(t, r, "0", "1", key, &old)
	if got := fillOf(t, conntest.MustGet(t, r, "0", "1", key, &newer)); got != 2 {
		t.Fatalf("got version %d", got)
	}
}

// Break: a re-put does not retire the unclaimed earlier frame of its key,
// so a receiver that indexed the earlier frame delivers it after another
// receiver took the new one: two deliveries of one key.
func TestRePutRetiresTheUnclaimedVersion(t *testing.T) {
	l := newLap(t)
	first, second := l.receiver(), l.receiver()
	key := l.key()
	l.put(key, 1)
	conntest.Missing(t, second, "0", "1", l.key(), nil) // attaches, indexes key
	l.put(key, 2)
	if got := fillOf(t, conntest.MustGet(t, first, "0", "1", key, nil)); got != 2 {
		t.Fatalf("first receiver got version %d", got)
	}
	if v, _, ok, err := second.Get("0", "1", key, nil); ok || err != nil {
		t.Fatalf("second receiver got %s (ok=%v, err=%v): the retired version was delivered", lapVersion(v), ok, err)
	}
}

// Break: a receiver's index keeps positions that fell behind tail, so after
// a wrap its stale entry for a key points at another key's frame, at the
// same offset, and delivers that payload as the key's.
func TestIndexForgetsFramesBehindTail(t *testing.T) {
	l := newLap(t)
	taker, indexer := l.receiver(), l.receiver()
	key := l.key()
	d := l.put(key, 1)
	conntest.Missing(t, indexer, "0", "1", l.key(), nil) // indexes key, leaves it
	conntest.MustGet(t, taker, "0", "1", key, nil)
	l.fill(taker, lapBytes/frameBytes-1)
	other := l.key()
	if od := l.put(other, 2); !sameOffsetLater(od, d) {
		t.Fatalf("setup: %s is at %d, want a later lap than %d", other, od.HostRing.Position, d.HostRing.Position)
	}
	if v, _, ok, err := indexer.Get("0", "1", key, nil); ok || err != nil {
		t.Fatalf("got %s (ok=%v, err=%v) for a key claimed a lap ago", lapVersion(v), ok, err)
	}
	if got := fillOf(t, conntest.MustGet(t, indexer, "0", "1", other, nil)); got != 2 {
		t.Fatalf("got version %d of %s", got, other)
	}
}

// Break: discovery stops at the first ring holding the key (and caches the
// registry stamp), so a second producer of the edge that the directory
// lists after it is never attached, and its payloads are never delivered.
// Which producer the directory lists first is the file system's choice:
// both orders are asked for.
func TestDiscoveryAttachesEveryProducer(t *testing.T) {
	for _, askFirst := range []int{0, 1} {
		t.Run(fmt.Sprint("key of producer ", askFirst, " first"), func(t *testing.T) {
			s := shmtest.Scope(t)
			var keys [2]string
			for i := range keys {
				keys[i] = shmtest.Key("producer")
				conntest.MustPut(t, conntest.Open(t, s, "0", lapBytes), "0", "1", keys[i], conntest.Codes(2, int64(i)))
			}
			r := conntest.Open(t, s, "1", lapBytes)
			for _, i := range []int{askFirst, 1 - askFirst} {
				if got := conntest.CodesOf(t, conntest.MustGet(t, r, "0", "1", keys[i], nil)); got[0] != int64(i) {
					t.Fatalf("got %v for producer %d", got, i)
				}
			}
		})
	}
}

// Break: a receive waits for another process's ring lock (blocking, or
// retrying for seconds) instead of missing at once (SPEC §3, §9). The lock
// holder lets go once the receive has returned, or after holdFor: a
// receive still waiting then would take the frame. holdFor is a guard, not
// a measurement: a receive that never waits returns in microseconds.
func TestReceiveMissesAtOnceUnderAnotherProcessLock(t *testing.T) {
	const holdFor = 2 * time.Second
	l := newLap(t)
	attached := l.receiver()
	l.fill(attached, 1) // makes the ring and attaches it
	cases := []struct {
		name     string
		r        *connector.SHM
		describe bool
	}{
		{"attached ring", attached, false},
		{"attached ring, descriptor", attached, true},
		{"ring not attached yet", l.receiver(), false},
		{"ring not attached yet, descriptor", l.receiver(), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := l.key()
			d := l.put(key, 1)
			var desc *connector.Descriptor
			if c.describe {
				desc = &d
			}
			holder := conntest.HoldRing(t, d)
			type result struct {
				ok  bool
				err error
			}
			done := make(chan result, 1)
			go func() {
				_, _, ok, err := c.r.GetWithDeadline("0", "1", key, desc, time.Now().Add(time.Hour))
				done <- result{ok, err}
			}()
			var res result
			select {
			case res = <-done:
				holder.Release(t)
			case <-time.After(holdFor):
				holder.Release(t)
				res = <-done
			}
			if res.ok || res.err != nil {
				t.Fatalf("get under another process's lock: ok=%v err=%v; it waited for the lock", res.ok, res.err)
			}
			if got := fillOf(t, conntest.MustGet(t, c.r, "0", "1", key, desc)); got != 1 {
				t.Fatalf("got version %d", got)
			}
		})
	}
}

// Break: the receive dispatcher's sweep of a ring (Recv's wait, SPEC §8)
// waits for another process's ring lock instead of skipping the ring as
// busy, so a Recv of a per-key payload on the same edge is not woken until
// the lock is let go. The holder lets go once the Recv has returned, or
// after holdFor (a guard, as above).
func TestRecvWaitsForNoRingLock(t *testing.T) {
	const holdFor = 2 * time.Second
	l := newLap(t)
	r := l.receiver()
	l.fill(r, 1)
	d := l.put(l.key(), 1) // moves head: the next sweep must look
	holder := conntest.HoldRing(t, d)
	key := l.key()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		_, _, err := r.Recv(ctx, "0", key)
		done <- err
	}()
	conntest.MustPut(t, l.sender, "0", "1", key, bytes.Repeat([]byte{7}, lapBytes)) // per key: over a quarter of the ring
	var err error
	waited := false
	select {
	case err = <-done:
		holder.Release(t)
	case <-time.After(holdFor):
		waited = true
		holder.Release(t)
		err = <-done
	}
	if err != nil || waited {
		t.Fatalf("recv of a per-key payload under another process's ring lock: err=%v, waited for the lock: %v", err, waited)
	}
}

// Break: a ring is attached although the start time of its creator pid
// differs from creator_start (SPEC §7: the pid was reused by another
// process), so a dead producer's frames are delivered. A live producer's
// ring is made to look like that by changing creator_start in its header,
// as a peer sees it.
func TestRingOfAReusedPidIsNotAttached(t *testing.T) {
	for _, withDescriptor := range []bool{false, true} {
		t.Run(fmt.Sprint("descriptor=", withDescriptor), func(t *testing.T) {
			s := conntest.CrashScope(t)
			key := shmtest.Key("reused")
			p, d := startProducer(t, s, lapBytes, key, 3, 5)
			f, err := os.OpenFile(scope.Path(d.HostRing.Name), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			var start [8]byte
			_, err = f.ReadAt(start[:], 40) // creator_start (SPEC §3)
			if err == nil {
				binary.LittleEndian.PutUint64(start[:], binary.LittleEndian.Uint64(start[:])+1)
				_, err = f.WriteAt(start[:], 40)
			}
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			r := conntest.Open(t, s, "1", lapBytes)
			desc := d
			if !withDescriptor {
				desc = nil
			}
			conntest.Missing(t, r, "0", "1", key, desc)
			p.Send(t, "close")
			p.Expect(t, shmtest.Patience, "closed")
		})
	}
}

// Break: the 65535-byte key limit of ring frames is dropped (key_len is a
// u16: a longer key would be written truncated). Connector keys never get
// near it: keys.Check refuses keys over 237 bytes on every path, so the
// connector test takes the longest key it allows through the ring, and the
// limit itself is met through the ring's API on a ring large enough for a
// frame with such a key (capacity/4 = 16 MiB).
func TestRingKeyLimit(t *testing.T) {
	t.Run("connector", func(t *testing.T) {
		sender, receiver := conntest.Edge(t, lapBytes)
		longest := shmtest.Key("k")
		longest += strings.Repeat("k", 237-len(longest))
		d := conntest.MustPut(t, sender, "0", "1", longest, conntest.Codes(2, 7))
		if d.HostRing == nil {
			t.Fatalf("a %d-byte key took %v, want the ring", len(longest), d)
		}
		conntest.MustGet(t, receiver, "0", "1", longest, nil)
		if _, _, err := sender.Put("0", "1", longest+"k", conntest.Codes(2, 7)); !errors.Is(err, connector.ErrBadKey) {
			t.Fatalf("put of a %d-byte key: %v, want ErrBadKey", len(longest)+1, err)
		}
	})
	t.Run("ring", func(t *testing.T) {
		names := scope.New(shmtest.Scope(t))
		open := func() *ring.Transport {
			tr, err := ring.New(ring.Options{Names: names, Capacity: ring.MaxCapacity})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close() })
			return tr
		}
		producer, receiver := open(), open()
		put := func(key string) bool {
			t.Helper()
			_, ok, err := producer.Put("0", "1", key, ring.KindBytes, 3, func(dst []byte) error {
				copy(dst, "abc")
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		atLimit := strings.Repeat("k", 65535)
		if !put(atLimit) {
			t.Fatal("a 65535-byte key was refused")
		}
		v, _, ok, err := receiver.Get("0", "1", atLimit, nil, func(_ ring.Kind, b []byte) (any, error) { return string(b), nil })
		if !ok || err != nil || v != "abc" {
			t.Fatalf("get of the 65535-byte key: %v, ok=%v, err=%v", v, ok, err)
		}
		if put(atLimit + "k") {
			t.Fatal("a 65536-byte key was put in the ring")
		}
	})
}

func TestFallbackMissWhileLockHeldThenClaim(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	key := shmtest.Key("fallback-claim")
	big := conntest.Codes(4096, 0)["codes"]
	d := conntest.MustPut(t, sender, "0", "1", key, big)
	if d.Shm == nil {
		t.Fatalf("a 32 KiB tensor took %v on a 4 KiB ring", d)
	}
	holder := shmtest.HoldLock(t, scope.Path(scope.LockName(key)))
	conntest.Missing(t, receiver, "0", "1", key, nil)
	holder.Release(t)
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[4095] != 4095 {
		t.Fatalf("got %v", got[4095])
	}
	conntest.Missing(t, receiver, "0", "1", key, &d)
	if _, err := os.Stat(scope.Path(scope.LockName(key))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file left behind: %v", err)
	}
}

func TestFullRingAndLargeFrameUseExistingShm(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	ring, shm := 0, 0
	for i := range 12 {
		d := conntest.MustPut(t, sender, "0", "1", "full"+strconv.Itoa(i), conntest.Codes(56, 0))
		if d.HostRing != nil {
			ring++
		} else {
			shm++
		}
	}
	if ring == 0 || shm == 0 {
		t.Fatalf("ring=%d shm=%d: want both paths used", ring, shm)
	}
	for i := 11; i >= 0; i-- {
		got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "full"+strconv.Itoa(i), nil))
		if got[55] != 55 {
			t.Fatalf("full%d: %v", i, got)
		}
	}
	d := conntest.MustPut(t, sender, "0", "1", "large", conntest.Codes(4096, 0)["codes"])
	if d.Shm == nil {
		t.Fatalf("large took %v", d)
	}
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", "large", &d)); got[4095] != 4095 {
		t.Fatal("large differs")
	}
	if d := conntest.MustPut(t, sender, "0", "1", "recovered", conntest.Codes(56, 0)); d.HostRing == nil {
		t.Fatalf("ring did not recover: %v", d)
	}
	conntest.MustGet(t, receiver, "0", "1", "recovered", nil)
	h := sender.Health()
	if h.Puts != 14 || h.HostRingPuts != uint64(ring+1) || h.HostRingFallbacks != uint64(shm+1) {
		t.Fatalf("health %+v", h)
	}
}

func TestReputAcrossRingAndFallbackAndStaleDescriptor(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	key := shmtest.Key("reuse")
	one := func(v int64) *tensor.Tensor { t, _ := tensor.FromSlice([]int64{v}); return t }
	full := func(v int64) *tensor.Tensor {
		vals := make([]int64, 4096)
		for i := range vals {
			vals[i] = v
		}
		t, _ := tensor.FromSlice(vals)
		return t
	}
	old := conntest.MustPut(t, sender, "0", "1", key, one(11))
	current := conntest.MustPut(t, sender, "0", "1", key, one(22))
	conntest.Missing(t, receiver, "0", "1", key, &old)
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", key, &current)); got[0] != 22 {
		t.Fatalf("got %v", got)
	}
	conntest.MustPut(t, sender, "0", "1", key, one(33))
	conntest.MustPut(t, sender, "0", "1", key, full(44))
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[0] != 44 {
		t.Fatalf("got %v, want the per-key version 44", got[0])
	}
	conntest.MustPut(t, sender, "0", "1", key, full(55))
	conntest.MustPut(t, sender, "0", "1", key, one(66))
	if got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); len(got) != 1 || got[0] != 66 {
		t.Fatalf("got %v, want the ring version 66", got)
	}
	if _, err := os.Stat(scope.Path(key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("replaced segment left behind: %v", err)
	}
	conntest.Missing(t, receiver, "0", "1", key, nil)
}

func TestDisabledRingAndFalsePayload(t *testing.T) {
	s := shmtest.Scope(t)
	legacy := conntest.Open(t, s, "0", connector.NoRing)
	receiver := conntest.Open(t, s, "1", 4096)
	d := conntest.MustPut(t, legacy, "0", "1", shmtest.Key("legacy"), conntest.Codes(3, 0))
	if d.Shm == nil {
		t.Fatalf("disabled ring used %v", d)
	}
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", d.Shm.Name, &d)); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("got %v", got)
	}
	sender := conntest.Open(t, s, "0", 4096)
	if d := conntest.MustPut(t, sender, "0", "1", "falsey", false); d.HostRing == nil {
		t.Fatalf("false took %v", d)
	}
	if v := conntest.MustGet(t, receiver, "0", "1", "falsey", nil); v != false {
		t.Fatalf("got %#v", v)
	}
}

func TestDescriptorMapForm(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	d := conntest.MustPut(t, sender, "0", "1", "mapped", conntest.Codes(3, 7))
	wrapped := `{"mapped": ` + d.String() + `}`
	pd, err := descriptor.Parse([]byte(wrapped), "mapped")
	if err != nil || pd.HostRing == nil || pd.HostRing.Position != d.HostRing.Position {
		t.Fatalf("parse %s: %+v %v", wrapped, pd, err)
	}
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "mapped", pd)); got[0] != 7 {
		t.Fatal("wrong value")
	}
}

// A tensor tree whose frame is too large for the ring but whose plain form
// fits goes through the ring as kind-0 bytes, as the seed does (SPEC §9).
func TestPlainFormTakesTheRingWhenTheFrameDoesNotFit(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	key := "plain-fits"
	limit := connector.RingMaxPayload(sender, key)
	var payload map[string]any
	for n := 1; n < 256 && payload == nil; n++ {
		p := conntest.Codes(n, 0)
		if frameSize(t, p) > limit && plainSize(t, p) <= limit {
			payload = p
		}
	}
	if payload == nil {
		t.Fatal("no tensor size between the frame limit and the plain limit")
	}
	d := conntest.MustPut(t, sender, "0", "1", key, payload)
	if d.HostRing == nil {
		t.Fatalf("took %v, want the ring", d)
	}
	got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, &d))
	want := conntest.Int64s(t, payload["codes"])
	if !slices.Equal(got, want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
}

// A ring descriptor reads only its publication (SPEC §9): once a per-key
// put has replaced it, the descriptor misses even though a segment of the
// key is there, and a get without a descriptor takes the segment.
func TestRingDescriptorNeverFallsBackToTheSegment(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	key := shmtest.Key("only-ring")
	small := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 1))
	if small.HostRing == nil {
		t.Fatalf("took %v", small)
	}
	if d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(4096, 2)); d.Shm == nil {
		t.Fatalf("took %v", d)
	}
	conntest.Missing(t, receiver, "0", "1", key, &small)
	if _, err := os.Stat(scope.Path(key)); err != nil {
		t.Fatalf("the descriptor's miss touched the segment: %v", err)
	}
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[0] != 2 {
		t.Fatalf("got %v", got[0])
	}
}

// connector.Health counts both paths on both ends (SPEC §9): puts, gets, bytes and
// the ring's share.
func TestHealthCountsBothPaths(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	small, big := shmtest.Key("small"), shmtest.Key("big")
	n1, d1, err := sender.Put("0", "1", small, conntest.Codes(3, 0))
	if err != nil || d1.HostRing == nil {
		t.Fatalf("put: %v %v", d1, err)
	}
	n2, d2, err := sender.Put("0", "1", big, conntest.Codes(4096, 0))
	if err != nil || d2.Shm == nil {
		t.Fatalf("put: %v %v", d2, err)
	}
	conntest.MustGet(t, receiver, "0", "1", small, nil)
	conntest.MustGet(t, receiver, "0", "1", big, nil)
	conntest.Missing(t, receiver, "0", "1", big, nil)
	want := connector.Health{Puts: 2, BytesTransferred: uint64(n1 + n2), HostRingPuts: 1, HostRingFallbacks: 1}
	if h := sender.Health(); h != want {
		t.Fatalf("sender health %+v, want %+v", h, want)
	}
	if h := receiver.Health(); h != (connector.Health{Gets: 2, HostRingGets: 1}) {
		t.Fatalf("receiver health %+v", h)
	}
}

// A tensor-free payload goes into the ring as its kind-0 bytes; one too
// large for the ring, or refused by a full ring, reaches the receiver
// through the per-key path with the same bytes.
func TestTensorFreePayloadOnBothPaths(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	ids := func(n int) []any {
		l := make([]any, n)
		for i := range l {
			l[i] = int64(i * 1000)
		}
		return l
	}
	for _, c := range []struct {
		n    int
		ring bool
	}{{10, true}, {2000, false}} {
		key := shmtest.Key("ids")
		d := conntest.MustPut(t, sender, "0", "1", key, map[string]any{"ids": ids(c.n)})
		if (d.HostRing != nil) != c.ring {
			t.Fatalf("%d ids took %v", c.n, d)
		}
		got := conntest.MustGet(t, receiver, "0", "1", key, &d).(map[string]any)["ids"].([]any)
		if len(got) != c.n || got[c.n-1] != int64((c.n-1)*1000) {
			t.Fatalf("%d ids: got %d, last %v", c.n, len(got), got[len(got)-1])
		}
	}
	// Fill the ring with unclaimed frames: the next small payload falls back.
	var refused *connector.Descriptor
	for i := 0; i < 64 && refused == nil; i++ {
		d := conntest.MustPut(t, sender, "0", "1", shmtest.Key("fill"), map[string]any{"ids": ids(100)})
		if d.Shm != nil {
			refused = &d
		}
	}
	if refused == nil {
		t.Fatal("the ring never filled")
	}
	got := conntest.MustGet(t, receiver, "0", "1", refused.Shm.Name, refused).(map[string]any)["ids"].([]any)
	if len(got) != 100 || got[99] != int64(99000) {
		t.Fatalf("fallback payload: %d ids", len(got))
	}
}

// The seed's test_ring_setup_failure_keeps_connector_usable: a ring that
// cannot be set up (here its registry is a plain file, so no marker can be
// made) logs one warning for the edge, removes what it made, and the edge's
// puts take the per-key path, which a receiver of the scope still reads.
func TestRingSetupFailureKeepsConnectorUsable(t *testing.T) {
	s := shmtest.Scope(t)
	sender, warns := conntest.OpenWarned(t, s, "0", 4096)
	receiver := conntest.Open(t, s, "1", 4096)
	registry := sender.Names().RingDir()
	if err := os.WriteFile(registry, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(registry) })
	for i := range 2 {
		key := shmtest.Key("no-ring")
		if d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, int64(i))); d.Shm == nil {
			t.Fatalf("put %d took %v, want the per-key path", i, d)
		}
		if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[0] != int64(i) {
			t.Fatalf("got %v", got)
		}
	}
	if n := warns.Count(); n != 1 {
		t.Fatalf("%d warnings, want one for the edge", n)
	}
	if h := sender.Health(); h.HostRingPuts != 0 || h.HostRingFallbacks != 2 {
		t.Fatalf("health %+v", h)
	}
	if left, _ := filepath.Glob(scope.Path(sender.Names().RingPrefix()) + "*"); len(left) != 0 {
		t.Fatalf("the failed setup left %v", left)
	}
}
