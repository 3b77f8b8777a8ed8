//go:build linux

package interop

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"omnishm/descriptor"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/shmstate"
)

// These tests drive a ring.Transport directly, without a connector,
// against the seed's HostRingTransport on a 4096-byte ring, so that
// payloads of a few hundred bytes wrap it many times (padding frames,
// reclaim on both sides).

// newRing is a ring.Transport of capacity bytes in scope s, closed when the
// test ends.
func newRing(t *testing.T, s string, capacity int) *ring.Transport {
	t.Helper()
	tr, err := ring.New(ring.Options{Names: scope.New(s), Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func ringPut(t *testing.T, tr *ring.Transport, key string, payload []byte) descriptor.RingHandle {
	t.Helper()
	d, ok, err := tr.Put("0", "1", key, ring.KindBytes, len(payload), func(dst []byte) error { copy(dst, payload); return nil })
	if !ok || err != nil {
		t.Fatalf("put %s: ok=%v err=%v", key, ok, err)
	}
	return d
}

// ringGet claims key on edge 0->1; nil for a miss.
func ringGet(t *testing.T, tr *ring.Transport, key string, d *descriptor.RingHandle) []byte {
	t.Helper()
	v, size, ok, err := tr.Get("0", "1", key, d, func(_ ring.Kind, b []byte) (any, error) { return bytes.Clone(b), nil })
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if !ok {
		return nil
	}
	if b := v.([]byte); len(b) == size {
		return b
	}
	t.Fatalf("get %s: size %d for %d bytes", key, size, len(v.([]byte)))
	return nil
}

// codes is a 448-byte payload that differs for every i.

func descJSON(t *testing.T, d descriptor.RingHandle) string {
	t.Helper()
	b, err := json.Marshal(descriptor.Descriptor{HostRing: &d, Size: d.Size})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGoRingTransportToPythonReceiver(t *testing.T) {
	s := shmtest.Scope(t)
	py := startServer(t, s)
	p := newRing(t, s, 4096)
	for i := range 40 { // wraps the ring several times
		key := shmtest.Key("g" + strings.Repeat("x", i%7) + "_" + string(rune('a'+i%26)))
		d := ringPut(t, p, key, shmtest.CodeBytes(i))
		desc := ""
		if i%2 == 0 {
			desc = descJSON(t, d)
		}
		r, data := py.get(t, key, "10", desc)
		if r == nil || r.Kind != int(ring.KindBytes) || !bytes.Equal(data, shmtest.CodeBytes(i)) {
			t.Fatalf("%s: Python got %+v", key, r)
		}
	}
	pending := shmtest.Key("pending")
	ringPut(t, p, pending, []byte("p"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if r, _ := py.get(t, pending, "0", ""); r != nil {
		t.Fatalf("Python read a closed producer's frame: %+v", r)
	}
}

func TestPythonRingProducerToGoRingTransport(t *testing.T) {
	s := shmtest.Scope(t)
	// What the crashed producer leaves (its ring, marker, the directory)
	// goes as in a deployment: `omnishm prune`'s sweep, once it is dead.
	t.Cleanup(func() {
		if _, err := shmstate.Prune(shmstate.PruneOptions{Options: shmstate.Options{Scopes: []string{s}}}); err != nil {
			t.Error(err)
		}
	})
	first := shmtest.Key("p_first")
	py := startPeer(t, "put", s, "0", "1", first, "0", hexFile(t, shmtest.CodeBytes(0)), "--ring-bytes", "4096")
	parseRing := func(key string) descriptor.RingHandle {
		t.Helper()
		d := conntest.ParseDescriptor(t, py.line(t), key)
		if d.HostRing == nil {
			t.Fatalf("%s: Python put took no ring", key)
		}
		return *d.HostRing
	}
	put := func(key string, data []byte) descriptor.RingHandle {
		t.Helper()
		py.send(t, "put "+key+" 0 "+hexFile(t, data))
		return parseRing(key)
	}
	firstDesc := parseRing(first)
	py.expect(t, "ready")
	r := newRing(t, s, 4096)
	if got := ringGet(t, r, first, &firstDesc); !bytes.Equal(got, shmtest.CodeBytes(0)) {
		t.Fatalf("first: got %x", got)
	}
	for i := 1; i < 40; i++ {
		key := shmtest.Key("p_" + string(rune('a'+i%26)) + strings.Repeat("y", i%5))
		d := put(key, shmtest.CodeBytes(i))
		var desc *descriptor.RingHandle
		if i%2 == 1 {
			desc = &d
		}
		if got := ringGet(t, r, key, desc); !bytes.Equal(got, shmtest.CodeBytes(i)) {
			t.Fatalf("%s: Go got %x", key, got)
		}
	}
	// A replace by the Python producer is seen by the Go reader: the newer
	// value, once.
	re := shmtest.Key("re")
	put(re, []byte{1})
	put(re, []byte{2})
	if got := ringGet(t, r, re, nil); !bytes.Equal(got, []byte{2}) {
		t.Fatalf("replaced: got %v", got)
	}
	if got := ringGet(t, r, re, nil); got != nil {
		t.Fatalf("replaced key claimed twice: %v", got)
	}
	// A Python producer that exits without close: its frame is never read.
	orphan := shmtest.Key("orphan")
	d := put(orphan, []byte{11})
	py.send(t, "crash")
	py.exit(t)
	if got := ringGet(t, r, orphan, &d); got != nil {
		t.Fatalf("a dead producer's frame was read by descriptor: %v", got)
	}
	if got := ringGet(t, r, orphan, nil); got != nil {
		t.Fatalf("a dead producer's frame was read by key: %v", got)
	}
}
