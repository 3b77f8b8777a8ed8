//go:build linux

package connector_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
)

// PutMany publishes each payload as Put would: small ones as ring frames,
// one over the ring's limit as a segment, one whose key has a per-key
// publication through Put (which retires that one); it stops after a bad
// key, and a receiver gets every payload once. A ring descriptor it
// returns tells its claim.
func TestPutMany(t *testing.T) {
	send, recv := conntest.Edge(t, ring.DefaultCapacity)
	keys := map[string]string{}
	k := func(s string) string { // a key of the test's own, the same for s each time
		if keys[s] == "" {
			keys[s] = shmtest.Key("many-" + s)
		}
		return keys[s]
	}
	big := conntest.Codes(connector.RingMaxPayload(send, k("big"))/8+1, 500)
	// A per-key publication of k("rep"), which the batch replaces.
	if d := conntest.MustPut(t, send, "0", "1", k("rep"), big); d.Shm == nil {
		t.Fatalf("the large put took %v, want a segment", d)
	}
	puts := []connector.Publication{
		{Key: k("a"), Payload: conntest.Codes(8, 0)},
		{Key: k("b"), Payload: conntest.Codes(8, 100)},
		{Key: k("big"), Payload: big},
		{Key: k("c"), Payload: map[string]any{"plain": "no tensors"}},
		{Key: k("rep"), Payload: conntest.Codes(8, 200)},
		{Key: k("d"), Payload: conntest.Codes(8, 300)},
		{Key: "", Payload: conntest.Codes(1, 0)},
		{Key: k("after"), Payload: conntest.Codes(1, 0)},
	}
	before := send.Health().Puts
	if n := send.PutMany("0", "1", puts); n != 7 {
		t.Fatalf("tried %d, want 7 (up to the bad key)", n)
	}
	for i, p := range puts[:6] {
		onRing := p.Key != k("big")
		if p.Err != nil || p.Size == 0 || p.Size != p.Descriptor.Size || (p.Descriptor.HostRing != nil) != onRing {
			t.Fatalf("put %d (%s): size %d, descriptor %v, err %v", i, p.Key, p.Size, p.Descriptor, p.Err)
		}
	}
	if !errors.Is(puts[6].Err, connector.ErrBadKey) || puts[7].Err != nil || puts[7].Size != 0 {
		t.Fatalf("bad key: %v; after it: %d bytes, %v", puts[6].Err, puts[7].Size, puts[7].Err)
	}
	if got := send.Health().Puts - before; got != 6 {
		t.Fatalf("Health counts %d puts, want 6", got)
	}

	for _, c := range []struct {
		key   string
		codes []int64
	}{{k("a"), seq(0, 8)}, {k("b"), seq(100, 8)}, {k("big"), conntest.CodesOf(t, big)}, {k("rep"), seq(200, 8)}, {k("d"), seq(300, 8)}} {
		if got := conntest.CodesOf(t, conntest.MustGet(t, recv, "0", "1", c.key, nil)); !slices.Equal(got, c.codes) {
			t.Fatalf("%s: got %v", c.key, got)
		}
		conntest.Missing(t, recv, "0", "1", c.key, nil) // once
	}
	if v, ok := conntest.MustGet(t, recv, "0", "1", k("c"), nil).(map[string]any); !ok || v["plain"] != "no tensors" {
		t.Fatalf("plain payload: %v", v)
	}
	conntest.Missing(t, recv, "0", "1", k("after"), nil)

	ctx, cancel := context.WithTimeout(t.Context(), shmtest.Patience)
	defer cancel()
	if err := send.WaitClaimed(ctx, puts[0].Descriptor); err != nil {
		t.Fatalf("WaitClaimed of a claimed batch frame: %v", err)
	}
}

// A full ring refuses the frames it has no room for, and those take the
// per-key path, as Put's do; the rest of the pass still goes to the ring.
func TestPutManyFullRing(t *testing.T) {
	send, recv := conntest.Edge(t, 4096)
	var puts []connector.Publication
	for i := range 8 { // 8 frames of ~600 bytes: the ring holds 6
		puts = append(puts, connector.Publication{Key: shmtest.Key("full"), Payload: conntest.Codes(64, int64(100*i))})
		puts[i].Key += string(rune('a' + i))
	}
	if n := send.PutMany("0", "1", puts); n != len(puts) {
		t.Fatalf("tried %d", n)
	}
	var segments int
	for i, p := range puts {
		if p.Err != nil {
			t.Fatalf("put %d: %v", i, p.Err)
		}
		if p.Descriptor.Shm != nil {
			segments++
		}
	}
	if segments == 0 || segments == len(puts) {
		t.Fatalf("%d of %d puts took a segment: want a full ring part of the way", segments, len(puts))
	}
	for i, p := range puts {
		if got := conntest.CodesOf(t, conntest.MustGet(t, recv, "0", "1", p.Key, nil)); !slices.Equal(got, seq(int64(100*i), 64)) {
			t.Fatalf("%s: got %v", p.Key, got)
		}
	}
}

func seq(start int64, n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = start + int64(i)
	}
	return s
}

// Receivers asleep in Recv, whose safety re-poll is an hour away, get
// every payload of one PutMany pass: the pass wakes the stage once, and
// the dispatcher claims what the pass put.
func TestPutManyWakesSleepingReceivers(t *testing.T) {
	send, recv := unpolledEdge(t)
	var puts []connector.Publication
	for i := range 4 {
		puts = append(puts, connector.Publication{Key: shmtest.Key("woken"), Payload: conntest.Codes(8, int64(10*i))})
	}
	ctx, cancel := context.WithTimeout(t.Context(), shmtest.Patience)
	defer cancel()
	got := make(chan error, len(puts))
	for i, p := range puts {
		go func() {
			v, _, err := recv.Recv(ctx, "0", p.Key)
			switch {
			case err != nil:
			case ctx.Err() != nil:
				// A Recv whose wait ended still claims what is there.
				err = errors.New(p.Key + ": taken only once the wait ended: no wakeup came")
			case !slices.Equal(conntest.CodesOf(t, v), seq(int64(10*i), 8)):
				err = errors.New(p.Key + ": wrong value")
			}
			got <- err
		}()
	}
	waitSettled(t, recv, len(puts))
	if n := send.PutMany("0", "1", puts); n != len(puts) {
		t.Fatalf("tried %d", n)
	}
	for range puts {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
}
