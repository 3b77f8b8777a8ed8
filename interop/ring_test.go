//go:build linux

package interop

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// A Python producer (the seed's HostRingTransport) publishes a Go-made tensor
// frame and Go-made msgpack; a Go connector finds them by key, through the
// Python-made marker and stamp, and by descriptor; each is claimed once.
func TestPythonRingProducerToGoReceiver(t *testing.T) {
	s := shmtest.Scope(t)
	keys := map[string]struct {
		kind   ring.Kind
		want   any
		byDesc bool
	}{
		shmtest.Key("py-frame"):      {ring.KindTensors, tensorPayload(1), false},
		shmtest.Key("py-plain"):      {ring.KindBytes, plainPayload(2, true), false},
		shmtest.Key("py-frame-desc"): {ring.KindTensors, tensorPayload(3), true},
		shmtest.Key("py-plain-desc"): {ring.KindBytes, plainPayload(4, false), true},
		shmtest.Key("py-ключ-✓"):     {ring.KindBytes, plainPayload(5, false), false},
	}
	order := make([]string, 0, len(keys))
	args := []string{"put", s, "0", "1"}
	for key, c := range keys {
		data := plainBytes(t, c.want)
		kind := "0"
		if c.kind == ring.KindTensors {
			data, kind = frameBytes(t, c.want), "1"
		}
		order = append(order, key)
		args = append(args, key, kind, hexFile(t, data))
	}
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	// Scan the edge before the producer exists: its ring must then be found
	// through the stamp change its marker makes (SPEC §7).
	missing(t, receiver, order[0], nil)

	py := startPeer(t, args...)
	descs := map[string]*connector.Descriptor{}
	var ringName string
	for _, key := range order {
		d := conntest.ParseDescriptor(t, py.line(t), key)
		if d.HostRing == nil {
			t.Fatalf("%s: Python put took no ring: %v", key, d)
		}
		descs[key], ringName = d, d.HostRing.Name
	}
	py.expect(t, "ready")
	if got := markers(t, s); len(got) != 1 || got[0] != ringName {
		t.Fatalf("markers %v, want [%s]", got, ringName)
	}

	for _, key := range order {
		c := keys[key]
		var d *connector.Descriptor
		if c.byDesc {
			d = descs[key]
		}
		got, size := getEventually(t, receiver, key, d)
		if size != descs[key].Size {
			t.Errorf("%s: size %d, descriptor says %d", key, size, descs[key].Size)
		}
		checkTree(t, key, c.want, got)
		missing(t, receiver, key, nil)
		missing(t, receiver, key, descs[key])
		// Nor can the Python side claim it again (SPEC §1: exactly once).
		if r, _ := pyGet(t, s, key, "", "0"); r != nil {
			t.Fatalf("%s: Python got it again after the Go claim: %+v", key, r)
		}
	}

	// Go marked the Python frames done (state byte at offset 9).
	info, err := ring.Inspect(scope.Path(ringName))
	if err != nil {
		t.Fatal(err)
	}
	if info.Busy || info.Producer != proc.Alive || int(info.Header.CreatorPID) != py.pid() {
		t.Fatalf("inspect: busy=%v producer %v pid=%d, want pid %d", info.Busy, info.Producer, info.Header.CreatorPID, py.pid())
	}
	for _, f := range info.Frames {
		if !f.Done {
			t.Errorf("frame %+v not done after the Go claim", f)
		}
		if want := keys[f.Key]; f.Kind != want.kind {
			t.Errorf("frame %s kind %v, want %v", f.Key, f.Kind, want.kind)
		}
	}

	py.finish(t, "close")
	shmtest.AssertAbsent(t, scope.Path(ringName), scope.New(s).RingDir())
}

// A Go producer's rings are read by the seed's Python receiver: discovery of
// the Go-made marker and stamp, the creator pid/start check against /proc,
// by key and by descriptor; the bytes decode to the originals, and a Go
// receiver then misses (exactly once across implementations).
func TestGoRingProducerToPythonReceiver(t *testing.T) {
	s := shmtest.Scope(t)
	sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	cases := []struct {
		name    string
		want    any
		kind    int
		byDesc  bool
		mapForm bool // the descriptor as {key: descriptor} (SPEC §9)
	}{
		{"go-frame", tensorPayload(5), 1, false, false},
		{"go-plain", plainPayload(6, false), 0, false, false},
		{"go-frame-desc", tensorPayload(7), 1, true, false},
		{"go-plain-desc", plainPayload(8, false), 0, true, false},
		{"go-frame-desc-map", tensorPayload(9), 1, true, true},
		// Keys are UTF-8 in ring frames (SPEC §3).
		{"go-ключ-✓", plainPayload(10, false), 0, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := shmtest.Key(c.name)
			_, d, err := sender.Put("0", "1", key, c.want)
			if err != nil {
				t.Fatal(err)
			}
			if d.HostRing == nil {
				t.Fatalf("Go put took no ring: %v", d)
			}
			desc := ""
			if c.byDesc {
				desc = d.String()
			}
			if c.mapForm {
				b, err := json.Marshal(map[string]any{key: d})
				if err != nil {
					t.Fatal(err)
				}
				desc = string(b)
			}
			r, data := pyGet(t, s, key, desc, "10")
			if r == nil {
				t.Fatal("the Python receiver missed a Go ring frame")
			}
			if r.Kind != c.kind || r.Size != d.Size {
				t.Fatalf("Python got kind %d size %d, want kind %d size %d", r.Kind, r.Size, c.kind, d.Size)
			}
			checkTree(t, key, c.want, decodeReceived(t, r, data))
			missing(t, receiver, key, nil)
			missing(t, receiver, key, &d)
		})
	}
}

// Frames a Go producer wrote in one pass under one ring lock
// (connector.SHM.PutMany, as a stream.Sender writes queued chunks) are
// each read by the seed's Python receiver, by key and by descriptor, as
// frames of single puts are.
func TestGoPutManyToPythonReceiver(t *testing.T) {
	s := shmtest.Scope(t)
	sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	puts := []connector.Publication{
		{Key: shmtest.Key("many-frame"), Payload: tensorPayload(11)},
		{Key: shmtest.Key("many-plain"), Payload: plainPayload(12, false)},
		{Key: shmtest.Key("many-frame-desc"), Payload: tensorPayload(13)},
	}
	if n := sender.PutMany("0", "1", puts); n != len(puts) {
		t.Fatalf("tried %d of %d", n, len(puts))
	}
	for i, p := range puts {
		if p.Err != nil || p.Descriptor.HostRing == nil {
			t.Fatalf("put %d: %v, %v", i, p.Descriptor, p.Err)
		}
		desc := ""
		if i == 2 {
			desc = p.Descriptor.String()
		}
		r, data := pyGet(t, s, p.Key, desc, "10")
		if r == nil || r.Size != p.Size {
			t.Fatalf("%s: the Python receiver got %+v, want %d bytes", p.Key, r, p.Size)
		}
		checkTree(t, p.Key, p.Payload, decodeReceived(t, r, data))
		missing(t, receiver, p.Key, nil)
	}
}

// A Go ring producer skips the wakeup of a Go receiver that is awake
// (wake.Notifier.NotifyRing), never a Python receiver's: Python keeps no
// sleepers count. The Python receiver sleeps on its FIFO between gets and
// polls only once a minute, so each of its payloads must have brought it a
// wakeup, while a Go receiver of the same stage, its dispatcher idle, counts
// no sleeper.
func TestPythonReceiverWokenBesideAnAwakeGoReceiver(t *testing.T) {
	s := shmtest.Scope(t)
	goReceiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	if _, _, err := goReceiver.Recv(ctx, "0", shmtest.Key("never")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv of a key never put: %v", err) // it started the dispatcher, which counts
	}
	cancel()
	const n = 20
	keys := make([]string, n)
	for i := range keys {
		keys[i] = shmtest.Key("sleep" + strconv.Itoa(i))
	}
	py := startPeer(t, append([]string{"sleep", s, "0", "1"}, keys...)...)
	py.expect(t, "ready")
	sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
	for i, key := range keys {
		want := plainPayload(int64(i), false)
		conntest.MustPut(t, sender, "0", "1", key, want)
		r, data := parseReceived(t, py.line(t))
		if r == nil {
			t.Fatalf("payload %d: the Python receiver slept through its wakeup", i)
		}
		got, err := wire.Unmarshal(data)
		if err != nil {
			t.Fatal(err)
		}
		checkTree(t, key, want, got)
	}
	py.exit(t)
}

// Re-publishing a key retires the earlier frame: its descriptor never reads
// the newer one (positions are monotonic, SPEC §3), in both directions.
func TestStaleDescriptor(t *testing.T) {
	t.Run("go-producer", func(t *testing.T) {
		s := shmtest.Scope(t)
		sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
		key := shmtest.Key("twice")
		_, first, err := sender.Put("0", "1", key, plainPayload(1, false))
		if err != nil {
			t.Fatal(err)
		}
		_, second, err := sender.Put("0", "1", key, plainPayload(2, false))
		if err != nil {
			t.Fatal(err)
		}
		if first.HostRing == nil || second.HostRing == nil || first.HostRing.Position == second.HostRing.Position {
			t.Fatalf("descriptors %v %v", first, second)
		}
		if r, _ := pyGet(t, s, key, first.String(), "0"); r != nil {
			t.Fatalf("a stale descriptor read %+v", r)
		}
		r, data := pyGet(t, s, key, second.String(), "0")
		if r == nil {
			t.Fatal("the current descriptor missed")
		}
		got, err := wire.Unmarshal(data)
		if err != nil {
			t.Fatal(err)
		}
		checkTree(t, "second version", plainPayload(2, false), got)
	})
	t.Run("python-producer", func(t *testing.T) {
		s := shmtest.Scope(t)
		key := shmtest.Key("twice")
		py := startPeer(t, "put", s, "0", "1",
			key, "0", hexFile(t, plainBytes(t, plainPayload(1, false))),
			key, "1", hexFile(t, frameBytes(t, tensorPayload(2))))
		first, second := conntest.ParseDescriptor(t, py.line(t), key), conntest.ParseDescriptor(t, py.line(t), key)
		py.expect(t, "ready")
		receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
		missing(t, receiver, key, first)
		got, _ := getEventually(t, receiver, key, second)
		checkTree(t, "second version", tensorPayload(2), got)
		missing(t, receiver, key, nil)
	})
}

// Frames of a dead Python producer (gone without close) are never delivered
// to a Go receiver, whether it had attached the ring before the death or not.
func TestDeadPythonProducer(t *testing.T) {
	s := conntest.CrashScope(t)
	alive, dead := shmtest.Key("alive"), shmtest.Key("dead")
	py := startPeer(t, "put", s, "0", "1",
		alive, "0", hexFile(t, plainBytes(t, plainPayload(1, false))),
		dead, "1", hexFile(t, frameBytes(t, tensorPayload(2))))
	conntest.ParseDescriptor(t, py.line(t), alive)
	deadDesc := conntest.ParseDescriptor(t, py.line(t), dead)
	py.expect(t, "ready")
	attached := conntest.Open(t, s, "1", ring.DefaultCapacity)
	got, _ := getEventually(t, attached, alive, nil)
	checkTree(t, alive, plainPayload(1, false), got)

	py.send(t, "crash")
	py.exit(t)
	fresh := conntest.Open(t, s, "1", ring.DefaultCapacity)
	for name, c := range map[string]*connector.SHM{"attached": attached, "fresh": fresh} {
		t.Run(name, func(t *testing.T) {
			missing(t, c, dead, deadDesc)
			missing(t, c, dead, nil)
		})
	}
}

// A Go producer killed with SIGKILL: while it lived, the Python receiver
// accepted its ring (creator pid and start time match /proc); after the
// kill, it rejects the ring (or finds it removed by the Go crash watchdog)
// and prunes the marker.
func TestKilledGoProducer(t *testing.T) {
	s := conntest.CrashScope(t)
	alive, dead := shmtest.Key("alive"), shmtest.Key("dead")
	p := shmtest.Start(t, "goproducer", s, alive, dead)
	aliveDesc := conntest.ParseDescriptor(t, p.Line(t, wait), alive)
	deadDesc := conntest.ParseDescriptor(t, p.Line(t, wait), dead)
	if aliveDesc.HostRing == nil || deadDesc.HostRing == nil {
		t.Fatalf("descriptors %v %v", aliveDesc, deadDesc)
	}
	r, data := pyGet(t, s, alive, "", "10")
	if r == nil {
		t.Fatal("the Python receiver missed a live Go producer's frame")
	}
	got, err := frame.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, alive, tensorPayload(0), got)

	p.Kill()
	if status, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !status.Signaled() {
		t.Fatalf("producer was not killed: %v", p.Cmd.ProcessState)
	}
	if r, _ := pyGet(t, s, dead, deadDesc.String(), "0"); r != nil {
		t.Fatalf("Python read a killed producer's frame by descriptor: %+v", r)
	}
	if r, _ := pyGet(t, s, dead, "", "0"); r != nil {
		t.Fatalf("Python read a killed producer's frame by key: %+v", r)
	}
	// Discovery pruned the marker, and the Python receiver's close removed
	// the then empty ring directory.
	shmtest.AssertAbsent(t, scope.New(s).RingDir())
	waitAbsent(t, "the watchdog to remove the killed producer's ring", scope.Path(deadDesc.HostRing.Name))
}

// Without a wakeup scope both implementations key their names by the parent
// pid (SPEC §2): a Go producer and a Python receiver started by the same
// parent (this test) meet in the same ring directory.
func TestNoScopeMeansTheParentPid(t *testing.T) {
	names := scope.ForUID(os.Getuid(), "", os.Getpid())
	conntest.RemoveAtEnd(t, names)
	key := shmtest.Key("noscope")
	p := shmtest.Start(t, "goproducer", "", key)
	d := conntest.ParseDescriptor(t, p.Line(t, wait), key)
	if d.HostRing == nil || !strings.HasPrefix(d.HostRing.Name, names.RingPrefix()) {
		t.Fatalf("descriptor %v, want a ring named %s...", d, names.RingPrefix())
	}
	r, data := pyGet(t, "@none", key, "", "10")
	if r == nil {
		t.Fatal("the Python receiver without a scope missed the Go producer without one")
	}
	checkTree(t, key, tensorPayload(0), decodeReceived(t, r, data))
	p.Send(t, "close")
	p.Exited(t, wait)
	shmtest.AssertAbsent(t, scope.Path(d.HostRing.Name), names.RingDir())
}

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
	if d3 := conntest.ParseDescriptor(t, child.Line(t, wait), k3); d3.HostRing == nil {
		t.Fatalf("child descriptor %v", d3)
	}
	claim(k3, tensorPayload(0))
	child.Send(t, "close")
	child.Exited(t, wait)

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
		conntest.ParseDescriptor(t, py.line(t), key)
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
			d := conntest.ParseDescriptor(t, py.line(t), key)
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
				d := conntest.ParseDescriptor(t, line, key)
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

// recvLater starts a Go RecvMessage of key on edge 0->1 and waits until
// the connector's dispatcher holds it (waiting counts the Recv calls
// expected to wait, this one included), so what arrives next reaches it
// through the dispatcher, not through Recv's first look.
func recvLater(t *testing.T, c *connector.SHM, key string, waiting int) <-chan connector.Message {
	t.Helper()
	got := make(chan connector.Message, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		m, err := c.RecvMessage(ctx, "0", key)
		if err != nil {
			t.Errorf("recv %s: %v", key, err)
		}
		got <- m
	}()
	shmtest.Eventually(t, wait, "the Recv of "+key+" to wait", func() bool { return c.Waiting() == waiting })
	return got
}

// A Python producer reaches Go waiters through the dispatcher, on the ring
// (its first put makes the ring, found through the registry; the second
// arrives in an attached ring, announced by a wakeup as the connector
// sends it) and on the per-key path (found through the lock file it
// closes: per-key puts here send no wakeup at all).
func TestPythonProducerToGoWaiters(t *testing.T) {
	s := shmtest.Scope(t)
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	first, second, seg := shmtest.Key("py-wait-ring"), shmtest.Key("py-wait-ring2"), shmtest.Key("py-wait-seg")
	want := map[string]any{first: tensorPayload(21), second: plainPayload(22, false), seg: plainPayload(23, true)}

	got := recvLater(t, receiver, first, 1)
	py := startPeer(t, "put", s, "0", "1", first, "1", hexFile(t, frameBytes(t, want[first])), "--wake")
	conntest.ParseDescriptor(t, py.line(t), first)
	if l := py.line(t); l != "ready" {
		t.Fatal(l)
	}
	m := <-got
	checkTree(t, first, want[first], m.Payload)
	if m.Producer.PID != py.pid() {
		t.Fatalf("message from %v, want the Python producer %d", m.Producer, py.pid())
	}
	if st, err := proc.StartTime(m.Producer.PID); err != nil || st != m.Producer.Start {
		t.Fatalf("producer start time %d, /proc says %d (%v)", m.Producer.Start, st, err)
	}

	got = recvLater(t, receiver, second, 1)
	py.send(t, "put "+second+" 0 "+hexFile(t, plainBytes(t, want[second])))
	conntest.ParseDescriptor(t, py.line(t), second)
	m = <-got
	checkTree(t, second, want[second], m.Payload)

	got = recvLater(t, receiver, seg, 1)
	segPeer := startPeer(t, "segput", seg, hexFile(t, plainBytes(t, want[seg])))
	if d := conntest.ParseDescriptor(t, segPeer.line(t), seg); d.Shm == nil {
		t.Fatalf("segput descriptor %v", d)
	}
	m = <-got
	checkTree(t, seg, want[seg], m.Payload)
	if m.Producer != (proc.ID{}) {
		t.Fatalf("a per-key segment named producer %v", m.Producer)
	}
	segPeer.send(t, "")
	if l := segPeer.line(t); l != "closed" {
		t.Fatal(l)
	}
	segPeer.exit(t)
	py.send(t, "close")
	if l := py.line(t); l != "closed" {
		t.Fatal(l)
	}
	py.exit(t)
}

// A Python receiver races the Go dispatcher for the same publications: Go
// waits in Recv on every key, Python claims from the first key on, while a
// Go producer puts them. Each publication goes to exactly one of them. The
// producer sends no wakeups, so the dispatcher finds ring frames only at
// its polls (every millisecond here) and Python gets its share of them.
func TestPythonReceiverCompetesWithTheDispatcher(t *testing.T) {
	const n = 120
	eachRace(t, "race-wait", n, func(t *testing.T, s string, ringBytes int, keys []string, want map[string]any) {
		sender, err := connector.Open(connector.Options{WakeupScope: s, StageID: "0", HostRingBytes: ringBytes, DisableWakeups: true})
		if err != nil {
			t.Fatal(err)
		}
		defer sender.Close()
		// Polls every millisecond: a race, not a rout.
		receiver, err := connector.Open(connector.Options{WakeupScope: s, StageID: "1", HostRingBytes: ringBytes, PollInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer receiver.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type goGot struct {
			key string
			m   connector.Message
			err error
		}
		results := make(chan goGot, n)
		for _, key := range keys {
			go func() {
				m, err := receiver.RecvMessage(ctx, "0", key)
				results <- goGot{key, m, err}
			}()
		}
		shmtest.Eventually(t, wait, "every Go Recv to wait", func() bool { return receiver.Waiting() == n })

		py := startClaimer(t, s, keys, 40, ringBytes == connector.NoRing)
		for _, key := range keys {
			if _, d, err := sender.Put("0", "1", key, want[key]); err != nil || (d.HostRing != nil) != (ringBytes > 0) {
				t.Fatalf("put %s: %v %v", key, d, err)
			}
		}
		byPython := pythonClaims(t, py, want)
		// Every key Python did not claim reaches its Go waiter.
		byGo := map[string]bool{}
		for range n - len(byPython) {
			g := <-results
			if g.err != nil {
				t.Fatalf("recv %s: %v", g.key, g.err)
			}
			if _, twice := byPython[g.key]; twice {
				t.Fatalf("%s claimed by both receivers", g.key)
			}
			checkTree(t, g.key, want[g.key], g.m.Payload)
			byGo[g.key] = true
		}
		// The waiters of Python's keys get nothing: their publications
		// are gone.
		cancel()
		for range len(byPython) {
			if g := <-results; g.err == nil || byGo[g.key] {
				t.Fatalf("a second claim of %s (err %v)", g.key, g.err)
			}
		}
		t.Logf("Go dispatcher claimed %d, Python %d of %d", len(byGo), len(byPython), n)
	})
}
