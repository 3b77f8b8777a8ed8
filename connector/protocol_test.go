//go:build linux

package connector_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
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

// fill puts and claims n frames, moving the ring's head n frames on.
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
	if newer.HostRing.Position != old.HostRing.Position+lapBytes {
		t.Fatalf("setup: the new version is at %d, want one lap after %d", newer.HostRing.Position, old.HostRing.Position)
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
	if od := l.put(other, 2); od.HostRing.Position != d.HostRing.Position+lapBytes {
		t.Fatalf("setup: %s is at %d, want one lap after %d", other, od.HostRing.Position, d.HostRing.Position)
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
			holder := shmtest.HoldLock(t, scope.Path(d.HostRing.Name))
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
	holder := shmtest.HoldLock(t, scope.Path(d.HostRing.Name))
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
			s := shmtest.Scope(t)
			conntest.RemoveAtEnd(t, scope.New(s))
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
			if l := p.Line(t, wait); l != "closed" {
				t.Fatal(l)
			}
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
