//go:build linux

package interop

import (
	"context"
	"encoding/json"
	"errors"
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
		d := parseDesc(t, py.line(t), key)
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
	if info.Busy || info.Producer != proc.Alive || int(info.Header.CreatorPID) != py.cmd.Process.Pid {
		t.Fatalf("inspect: busy=%v producer %v pid=%d, want pid %d", info.Busy, info.Producer, info.Header.CreatorPID, py.cmd.Process.Pid)
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
			var got any
			if r.Kind == 1 {
				got, err = frame.Decode(data)
			} else {
				got, err = wire.Unmarshal(data)
			}
			if err != nil {
				t.Fatalf("decode what Python claimed: %v", err)
			}
			checkTree(t, key, c.want, got)
			missing(t, receiver, key, nil)
			missing(t, receiver, key, &d)
		})
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
		first, second := parseDesc(t, py.line(t), key), parseDesc(t, py.line(t), key)
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
	s := shmtest.Scope(t)
	conntest.RemoveAtEnd(t, scope.New(s))
	alive, dead := shmtest.Key("alive"), shmtest.Key("dead")
	py := startPeer(t, "put", s, "0", "1",
		alive, "0", hexFile(t, plainBytes(t, plainPayload(1, false))),
		dead, "1", hexFile(t, frameBytes(t, tensorPayload(2))))
	parseDesc(t, py.line(t), alive)
	deadDesc := parseDesc(t, py.line(t), dead)
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
	s := shmtest.Scope(t)
	conntest.RemoveAtEnd(t, scope.New(s))
	alive, dead := shmtest.Key("alive"), shmtest.Key("dead")
	p := shmtest.Start(t, "goproducer", s, alive, dead)
	aliveDesc := parseDesc(t, p.Line(t, wait), alive)
	deadDesc := parseDesc(t, p.Line(t, wait), dead)
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
	d := parseDesc(t, p.Line(t, wait), key)
	if d.HostRing == nil || !strings.HasPrefix(d.HostRing.Name, names.RingPrefix()) {
		t.Fatalf("descriptor %v, want a ring named %s...", d, names.RingPrefix())
	}
	r, data := pyGet(t, "@none", key, "", "10")
	if r == nil {
		t.Fatal("the Python receiver without a scope missed the Go producer without one")
	}
	checkTree(t, key, tensorPayload(0), decodeReceived(t, r, data))
	p.Send(t, "close")
	if err := p.Wait(t, wait); err != nil {
		t.Fatal(err)
	}
	shmtest.AssertAbsent(t, scope.Path(d.HostRing.Name), names.RingDir())
}
