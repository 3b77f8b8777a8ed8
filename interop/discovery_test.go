//go:build linux

package interop

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"

	"omnishm/connector"
	"omnishm/frame"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/proc"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/tensor"
	"omnishm/wire"
)

// decodeReceived decodes what the Python receiver claimed, by its kind.
func decodeReceived(t *testing.T, r *received, data []byte) any {
	t.Helper()
	v, err := decodeKind(r.Kind, data)
	if err != nil {
		t.Fatalf("decode what Python claimed (kind %d): %v", r.Kind, err)
	}
	return v
}

// decodeKind decodes a frame's payload by its ring kind (SPEC §3): the
// tensor frame form or the plain wire form.
func decodeKind(kind int, data []byte) (any, error) {
	if kind == int(ring.KindTensors) {
		return frame.Decode(data)
	}
	return wire.Unmarshal(data)
}

// A long-lived Python receiver caches the ring directory's stamp once it has
// attached every producer (SPEC §7) and then answers misses without a scan:
// each new Go producer (another connector in this process, another process)
// must therefore change the stamp strictly, and one get after its put must
// find its first frame.
func TestPythonReceiverFollowsGoProducers(t *testing.T) {
	s := shmtest.Scope(t)
	py := startServer(t, s)
	if r, _ := py.get(t, shmtest.Key("nothing-yet"), "0", ""); r != nil {
		t.Fatalf("got %+v before any producer", r)
	}
	claim := func(key string, want any) {
		t.Helper()
		r, data := py.get(t, key, "0", "")
		if r == nil {
			t.Fatalf("Python receiver did not discover the producer of %s in one get", key)
		}
		checkTree(t, key, want, decodeReceived(t, r, data))
	}

	first := conntest.Open(t, s, "0", ring.DefaultCapacity)
	k1 := shmtest.Key("first")
	if _, d, err := first.Put("0", "1", k1, tensorPayload(1)); err != nil || d.HostRing == nil {
		t.Fatalf("put: %v %v", d, err)
	}
	claim(k1, tensorPayload(1))
	// The edge is cached now: a miss answers from the stamp.
	if r, _ := py.get(t, shmtest.Key("absent"), "0", ""); r != nil {
		t.Fatalf("got %+v", r)
	}

	second := conntest.Open(t, s, "0", ring.DefaultCapacity)
	k2 := shmtest.Key("second")
	if _, d, err := second.Put("0", "1", k2, plainPayload(2, false)); err != nil || d.HostRing == nil {
		t.Fatalf("put: %v %v", d, err)
	}
	claim(k2, plainPayload(2, false))

	k3 := shmtest.Key("child")
	child := shmtest.Start(t, "goproducer", s, k3)
	if d3 := parseDesc(t, child.Line(t, wait), k3); d3.HostRing == nil {
		t.Fatalf("child descriptor %v", d3)
	}
	claim(k3, tensorPayload(0))
	child.Send(t, "close")
	if err := child.Wait(t, wait); err != nil {
		t.Fatal(err)
	}

	// A producer that closed and one that replaces it.
	first.Close()
	third := conntest.Open(t, s, "0", ring.DefaultCapacity)
	k4 := shmtest.Key("third")
	if _, d, err := third.Put("0", "1", k4, tensorPayload(4)); err != nil || d.HostRing == nil {
		t.Fatalf("put: %v %v", d, err)
	}
	claim(k4, tensorPayload(4))

	py.finish(t, "")
}

// A Go receiver that already scanned an edge finds each new Python producer
// (a new process, a new ring, a new marker) on that edge.
func TestGoReceiverFollowsPythonProducers(t *testing.T) {
	s := shmtest.Scope(t)
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	missing(t, receiver, shmtest.Key("nothing-yet"), nil)
	var producers []*pyPeer
	for i := range 3 {
		key := shmtest.Key("py")
		want := tensorPayload(int64(i))
		py := startPeer(t, "put", s, "0", "1", key, "1", hexFile(t, frameBytes(t, want)))
		parseDesc(t, py.line(t), key)
		py.expect(t, "ready")
		got, _ := getEventually(t, receiver, key, nil)
		checkTree(t, key, want, got)
		producers = append(producers, py)
	}
	for _, py := range producers {
		py.finish(t, "close")
	}
	if got := markers(t, s); len(got) != 0 {
		t.Fatalf("markers left after the producers closed: %v", got)
	}
}

func inspect(t *testing.T, name string) ring.Info {
	t.Helper()
	info, err := ring.Inspect(scope.Path(name))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// wrapPayload alternates kind-0 and kind-1 payloads of varying sizes, so a
// 4096-byte ring wraps with padding frames (SPEC §3).
func wrapPayload(i int) any {
	if i%2 == 0 {
		return map[string]any{"i": int64(i), "pad": bytes.Repeat([]byte{byte(i)}, 40+(i*97)%560)}
	}
	vals := make([]int32, 8+(i*53)%150)
	for j := range vals {
		vals[j] = int32(i*1000 + j)
	}
	return map[string]any{"i": int64(i), "codes": must(tensor.FromSlice(vals))}
}

func wrapBytes(t *testing.T, i int) (kind string, data []byte) {
	if i%2 == 0 {
		return "0", plainBytes(t, wrapPayload(i))
	}
	return "1", frameBytes(t, wrapPayload(i))
}

// paddings counts the gaps between consecutive publications of one ring:
// each is a padding frame the producer wrote before wrapping.
type paddings struct {
	next  uint64
	count int
}

func (p *paddings) add(t *testing.T, key string, d *connector.Descriptor, capacity uint64) {
	t.Helper()
	pos := d.HostRing.Position
	if pos < p.next {
		t.Fatalf("%s at %d, before the previous frame's end %d", key, pos, p.next)
	}
	if pos > p.next {
		if pos%capacity != 0 {
			t.Fatalf("%s at %d: a gap that does not end at the ring's start", key, pos)
		}
		p.count++
	}
	total := (16 + uint64(len(key)) + uint64(d.HostRing.Size) + 15) &^ 15
	p.next = pos + total
}

// check fails unless the ring wrapped several times, with padding.
func (p *paddings) check(t *testing.T, capacity uint64) {
	t.Helper()
	if p.next < 3*capacity || p.count < 2 {
		t.Fatalf("ring reached %d with %d padding frames: no real wrap-around", p.next, p.count)
	}
}

// Small rings wrap many times while the other implementation claims each
// frame: the consumer's done marks let the producer reclaim, and padding
// frames are skipped by the reader, in both directions. A host_ring_bytes
// that is not a multiple of 16 is aligned up alike on both sides (SPEC §3).
func TestWrapAround(t *testing.T) {
	const n = 60
	for _, ringBytes := range []int{4096, 4100} {
		capacity := uint64(ringBytes+15) &^ 15
		t.Run(fmt.Sprintf("go-producer/%d", ringBytes), func(t *testing.T) {
			s := shmtest.Scope(t)
			sender := conntest.Open(t, s, "0", ringBytes)
			py := startServer(t, s)
			var gaps paddings
			for i := range n {
				key := shmtest.Key("wrap")
				_, d, err := sender.Put("0", "1", key, wrapPayload(i))
				if err != nil || d.HostRing == nil {
					t.Fatalf("put %d: %v %v (the Python claims should have freed the ring)", i, d, err)
				}
				gaps.add(t, key, &d, capacity)
				r, data := py.get(t, key, "0", "")
				if r == nil {
					t.Fatalf("Python missed frame %d at %d", i, d.HostRing.Position)
				}
				checkTree(t, key, wrapPayload(i), decodeReceived(t, r, data))
				if i == 0 {
					if got := inspect(t, d.HostRing.Name).Header.Capacity; got != capacity {
						t.Fatalf("Go ring capacity %d, want %d", got, capacity)
					}
				}
			}
			gaps.check(t, capacity)
		})
		t.Run(fmt.Sprintf("python-producer/%d", ringBytes), func(t *testing.T) {
			s := shmtest.Scope(t)
			receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
			key := shmtest.Key("wrap")
			kind, data := wrapBytes(t, 0)
			py := startPeer(t, "put", s, "0", "1", key, kind, hexFile(t, data), "--ring-bytes", strconv.Itoa(ringBytes))
			d := parseDesc(t, py.line(t), key)
			py.expect(t, "ready")
			if got := inspect(t, d.HostRing.Name).Header.Capacity; got != capacity {
				t.Fatalf("Python ring capacity %d, want %d", got, capacity)
			}
			var gaps paddings
			gaps.add(t, key, d, capacity)
			got, _ := getEventually(t, receiver, key, nil)
			checkTree(t, key, wrapPayload(0), got)
			for i := 1; i < n; i++ {
				key := shmtest.Key("wrap")
				kind, data := wrapBytes(t, i)
				py.send(t, "put "+key+" "+kind+" "+hexFile(t, data))
				line := py.line(t)
				if line == "null" {
					t.Fatalf("Python ring refused put %d: Go's claims did not free it", i)
				}
				d := parseDesc(t, line, key)
				gaps.add(t, key, d, capacity)
				// The ring is attached: a new frame is seen at once.
				got, _, ok, err := receiver.Get("0", "1", key, nil)
				if err != nil || !ok {
					t.Fatalf("Go get %d at %d: ok=%v err=%v", i, d.HostRing.Position, ok, err)
				}
				checkTree(t, key, wrapPayload(i), got)
			}
			gaps.check(t, capacity)
			py.finish(t, "close")
		})
	}
}

// The Go ring header carries exactly what the Python reader checks (SPEC
// §3): magic, capacity, creator pid and field 22 of /proc/{pid}/stat, zero
// reserved bytes. A wrong creator_start makes the Python reader reject the
// ring and delete its marker; the Go producer's close still succeeds.
func TestPythonChecksGoCreatorStart(t *testing.T) {
	s := shmtest.Scope(t)
	sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
	k1, k2 := shmtest.Key("accepted"), shmtest.Key("rejected")
	_, d1, err := sender.Put("0", "1", k1, plainPayload(1, false))
	if err != nil || d1.HostRing == nil {
		t.Fatalf("put: %v %v", d1, err)
	}
	path := scope.Path(d1.HostRing.Name)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	header := make([]byte, ring.HeaderSize)
	if _, err := f.ReadAt(header, 0); err != nil {
		t.Fatal(err)
	}
	self, err := proc.Self()
	if err != nil {
		t.Fatal(err)
	}
	h, err := ring.ReadHeader(header)
	if err != nil || h.Capacity != ring.DefaultCapacity || h.Creator() != self || !bytes.Equal(header[48:], make([]byte, 16)) {
		t.Fatalf("Go ring header % x (%+v, %v): want magic, capacity %d, creator %v, zeros", header, h, err, ring.DefaultCapacity, self)
	}
	if r, _ := pyGet(t, s, k1, "", "0"); r == nil {
		t.Fatal("Python rejected a live Go producer's ring")
	}

	_, d2, err := sender.Put("0", "1", k2, plainPayload(2, false))
	if err != nil || d2.HostRing == nil || d2.HostRing.Name != d1.HostRing.Name {
		t.Fatalf("put: %v %v", d2, err)
	}
	// As if the pid had been reused by another process.
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint64(nil, self.Start+1), 40); err != nil {
		t.Fatal(err)
	}
	if r, _ := pyGet(t, s, k2, d2.String(), "0"); r != nil {
		t.Fatalf("Python read a ring whose creator start does not match, by descriptor: %+v", r)
	}
	if r, _ := pyGet(t, s, k2, "", "0"); r != nil {
		t.Fatalf("Python read a ring whose creator start does not match, by key: %+v", r)
	}
	if got := markers(t, s); len(got) != 0 {
		t.Fatalf("Python kept the marker of a rejected ring: %v", got)
	}
	if err := sender.Close(); err != nil {
		t.Fatalf("Go close after the marker was pruned: %v", err)
	}
	shmtest.AssertAbsent(t, path, scope.New(s).RingDir())
}
