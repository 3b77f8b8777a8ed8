//go:build linux

package interop

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

// Retiring a key (cleanup / cleanup_prefix, SPEC §9) marks the producer's
// frame done under the ring lock: a receiver of the other implementation
// that had already indexed the frame must then miss it. Only keys that are
// the prefix followed by ASCII digits go.
func TestCancelAcrossImplementations(t *testing.T) {
	type keys struct{ single, digits1, digits2, other, probe, prefix string }
	newKeys := func() keys {
		prefix := shmtest.Key("req") + "_"
		return keys{
			single:  shmtest.Key("single"),
			digits1: prefix + "1",
			digits2: prefix + "22",
			other:   prefix + "3x",
			probe:   shmtest.Key("probe"),
			prefix:  prefix,
		}
	}
	t.Run("go-producer", func(t *testing.T) {
		s := shmtest.Scope(t)
		k := newKeys()
		sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
		for i, key := range []string{k.single, k.digits1, k.digits2, k.other, k.probe} {
			if _, d, err := sender.Put("0", "1", key, plainPayload(int64(i), false)); err != nil || d.HostRing == nil {
				t.Fatalf("put %s: %v %v", key, d, err)
			}
		}
		py := startServer(t, s)
		// Attach the ring and index every ready frame in it.
		if r, _ := py.get(t, k.probe, "0", ""); r == nil {
			t.Fatal("Python missed the probe")
		}
		if !sender.Cleanup(k.single) {
			t.Fatal("Cleanup retired nothing")
		}
		if n := sender.CleanupPrefix(k.prefix); n != 2 {
			t.Fatalf("CleanupPrefix retired %d, want 2", n)
		}
		for _, key := range []string{k.single, k.digits1, k.digits2} {
			if r, _ := py.get(t, key, "0", ""); r != nil {
				t.Fatalf("Python got retired key %s: %+v", key, r)
			}
		}
		if r, _ := py.get(t, k.other, "0", ""); r == nil {
			t.Fatalf("Python missed %s, which the prefix does not match", k.other)
		}
	})
	t.Run("python-producer", func(t *testing.T) {
		s := shmtest.Scope(t)
		k := newKeys()
		args := []string{"put", s, "0", "1"}
		for i, key := range []string{k.single, k.digits1, k.digits2, k.other, k.probe} {
			args = append(args, key, "0", hexFile(t, plainBytes(t, plainPayload(int64(i), false))))
		}
		py := startPeer(t, args...)
		for range 5 {
			py.line(t)
		}
		py.expect(t, "ready")
		receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
		getEventually(t, receiver, k.probe, nil)
		py.send(t, "cancel "+k.single)
		if l := py.line(t); l != "1" {
			t.Fatalf("Python cancel retired %s", l)
		}
		py.send(t, "cancel_prefix "+k.prefix)
		if l := py.line(t); l != "2" {
			t.Fatalf("Python cancel_prefix retired %s", l)
		}
		for _, key := range []string{k.single, k.digits1, k.digits2} {
			missing(t, receiver, key, nil)
		}
		if _, _, ok, err := receiver.Get("0", "1", k.other, nil); !ok || err != nil {
			t.Fatalf("Go missed %s, which the prefix does not match: %v", k.other, err)
		}
	})
}

// Go and Python producers share one scope's ring directory and edge: each
// receiver finds both rings' frames, the directory stays while either
// producer has a marker in it, and the last to close removes it. Modes
// follow SPEC §2 on both sides.
func TestMixedProducersShareTheRingDirectory(t *testing.T) {
	s := shmtest.Scope(t)
	names := scope.New(s)
	pk1, pk2 := shmtest.Key("py1"), shmtest.Key("py2")
	py := startPeer(t, "put", s, "0", "1",
		pk1, "1", hexFile(t, frameBytes(t, tensorPayload(1))),
		pk2, "0", hexFile(t, plainBytes(t, plainPayload(2, false))))
	pyRing := conntest.ParseDescriptor(t, py.line(t), pk1).HostRing.Name
	conntest.ParseDescriptor(t, py.line(t), pk2)
	py.expect(t, "ready")
	sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
	gk1, gk2 := shmtest.Key("go1"), shmtest.Key("go2")
	_, d, err := sender.Put("0", "1", gk1, tensorPayload(3))
	if err != nil || d.HostRing == nil {
		t.Fatalf("put: %v %v", d, err)
	}
	goRing := d.HostRing.Name
	if _, _, err := sender.Put("0", "1", gk2, plainPayload(4, false)); err != nil {
		t.Fatal(err)
	}

	checkMode(t, names.RingDir(), os.ModeDir|0o700)
	for _, ring := range []string{pyRing, goRing} {
		checkMode(t, scope.Path(ring), 0o600)
		checkMode(t, filepath.Join(names.RingDir(), ring), 0o600)
	}

	// The Python receiver attaches both rings in one discovery.
	srv := startServer(t, s)
	for key, want := range map[string]any{gk1: tensorPayload(3), pk1: tensorPayload(1)} {
		r, data := srv.get(t, key, "0", "")
		if r == nil {
			t.Fatalf("Python receiver missed %s", key)
		}
		checkTree(t, key, want, decodeReceived(t, r, data))
	}
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	got, _ := getEventually(t, receiver, pk2, nil)
	checkTree(t, pk2, plainPayload(2, false), got)
	got, _ = getEventually(t, receiver, gk2, nil)
	checkTree(t, gk2, plainPayload(4, false), got)

	if err := sender.Close(); err != nil {
		t.Fatal(err)
	}
	shmtest.AssertAbsent(t, scope.Path(goRing), filepath.Join(names.RingDir(), goRing))
	if got := markers(t, s); len(got) != 1 || got[0] != pyRing {
		t.Fatalf("markers after the Go producer closed: %v, want [%s]", got, pyRing)
	}
	py.finish(t, "close")
	shmtest.AssertAbsent(t, scope.Path(pyRing), names.RingDir())
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode() & (os.ModeType | os.ModePerm); got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

// Both producers keep a frame out of the ring exactly when its total
// (align16(16 + key + payload)) exceeds a quarter of the capacity (SPEC §3):
// on a 4096-byte ring a payload of 1008-len(key) bytes is the largest taken.
func TestQuarterCapacityBoundary(t *testing.T) {
	const capacity = 4096
	t.Run("go-producer", func(t *testing.T) {
		s := shmtest.Scope(t)
		sender := conntest.Open(t, s, "0", capacity)
		for _, extra := range []int{0, 1} {
			key := shmtest.Key("edge")
			payload := capacity/4 - 16 - len(key) + extra
			// A msgpack bin of n >= 256 bytes is n + 3 bytes (SPEC §5).
			size, d, err := sender.Put("0", "1", key, bytes.Repeat([]byte{7}, payload-3))
			if err != nil || size != payload {
				t.Fatalf("put of %d bytes: size %d, %v", payload, size, err)
			}
			if (d.HostRing != nil) != (extra == 0) {
				t.Fatalf("payload %d with key of %d bytes: descriptor %v", payload, len(key), d)
			}
			// Python claims it whichever path it took.
			var r *received
			if d.HostRing != nil {
				r, _ = pyGet(t, s, key, "", "0")
			} else {
				r, _ = parseReceived(t, runPeer(t, "segget", key, "--timeout", "0"))
			}
			if r == nil || r.Size != payload {
				t.Fatalf("Python got %+v, want %d bytes", r, payload)
			}
		}
	})
	t.Run("python-producer", func(t *testing.T) {
		s := shmtest.Scope(t)
		key := shmtest.Key("edge")
		payload := capacity/4 - 16 - len(key)
		py := startPeer(t, "put", s, "0", "1",
			key, "0", hexFile(t, bytes.Repeat([]byte{7}, payload)),
			key+"x", "0", hexFile(t, bytes.Repeat([]byte{7}, payload)),
			"--ring-bytes", strconv.Itoa(capacity))
		if d := conntest.ParseDescriptor(t, py.line(t), key); d.HostRing == nil || d.HostRing.Size != payload {
			t.Fatalf("Python refused %d bytes under a %d-byte key: %v", payload, len(key), d)
		}
		if l := py.line(t); l != "null" {
			t.Fatalf("Python took %d bytes under a %d-byte key: %s", payload, len(key)+1, l)
		}
		py.expect(t, "ready")
	})
}

// A Go producer must never make a Python receiver of its edge fail. Ring
// frame keys are UTF-8 (SPEC §3) and the seed's _Channel.scan decodes them
// strictly, outside any try: a frame whose key is not valid UTF-8 makes
// HostRingTransport.get (and so SharedMemoryConnector.get) raise
// UnicodeDecodeError in every Python receiver that scans it. So either the
// Go Put refuses such a key, or it keeps it out of the ring.
//
// segment.CheckKey refuses such keys, so they never reach a ring.
func TestGoKeyThatIsNotUTF8NeverBreaksAPythonReceiver(t *testing.T) {
	s := shmtest.Scope(t)
	sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
	bad, good := shmtest.Key("bad")+"\xff", shmtest.Key("good")
	if _, d, err := sender.Put("0", "1", bad, plainPayload(1, false)); err == nil && d.HostRing != nil {
		t.Errorf("a key that is not UTF-8 went into the ring: %v", d)
	}
	if _, _, err := sender.Put("0", "1", good, plainPayload(2, false)); err != nil {
		t.Fatal(err)
	}
	// pyGet fails the test if the Python receiver raises.
	if r, _ := pyGet(t, s, good, "", "0"); r == nil {
		t.Fatal("Python missed the good key")
	}
	sender.Cleanup(bad)
}

// A Go and a Python receiver race for the same publications (Python from the
// first key on, Go from the last back): the ring lock and done state, or the
// per-key lock file, give each publication to exactly one of them.
func TestCompetingReceiversClaimEachPublicationOnce(t *testing.T) {
	const n = 150
	eachRace(t, "race", n, func(t *testing.T, s string, ringBytes int, keys []string, want map[string]any) {
		sender := conntest.Open(t, s, "0", ringBytes)
		receiver := conntest.Open(t, s, "1", ringBytes)
		for i, key := range keys {
			_, d, err := sender.Put("0", "1", key, want[key])
			if err != nil || (d.HostRing != nil) != (ringBytes > 0) {
				t.Fatalf("put %d: %v %v", i, d, err)
			}
		}
		py := startClaimer(t, s, keys, 3, ringBytes == connector.NoRing)
		byGo := map[string]any{}
		for range 3 {
			for i := n - 1; i >= 0; i-- {
				if _, done := byGo[keys[i]]; done {
					continue
				}
				v, _, ok, err := receiver.Get("0", "1", keys[i], nil)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					byGo[keys[i]] = v
				}
			}
		}
		byPython := pythonClaims(t, py, want)
		t.Logf("Go claimed %d, Python %d of %d", len(byGo), len(byPython), n)
		for key := range byPython {
			if _, twice := byGo[key]; twice {
				t.Fatalf("%s claimed by both receivers", key)
			}
		}
		for _, key := range keys {
			if _, ok := byPython[key]; ok {
				continue
			}
			v, ok := byGo[key]
			if !ok {
				// Both missed it (lock contention): it is still there.
				var size int
				if v, size, ok, _ = receiver.Get("0", "1", key, nil); !ok || size == 0 {
					t.Fatalf("%s was claimed by neither receiver and is gone", key)
				}
			}
			checkTree(t, key, want[key], v)
		}
	})
}

// claimPaths are the two paths a race for publications runs on.
var claimPaths = []struct {
	name      string
	ringBytes int
}{{"ring", ring.DefaultCapacity}, {"segments", connector.NoRing}}

// eachRace runs fn on each claim path, in a scope of its own, with n
// unique keys named for a race between receivers and the payload each is
// to be published with (wrapPayload).
func eachRace(t *testing.T, name string, n int, fn func(t *testing.T, s string, ringBytes int, keys []string, want map[string]any)) {
	for _, c := range claimPaths {
		t.Run(c.name, func(t *testing.T) {
			keys, want := make([]string, n), map[string]any{}
			for i := range keys {
				keys[i] = shmtest.Key(name)
				want[keys[i]] = wrapPayload(i)
			}
			fn(t, shmtest.Scope(t), c.ringBytes, keys, want)
		})
	}
}

// startClaimer starts a Python receiver (peer.py claimall) that tries to
// claim each of keys passes times over, through the ring or, with
// segments, the per-key path, and lets it go.
func startClaimer(t *testing.T, s string, keys []string, passes int, segments bool) *pyPeer {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte(strings.Join(keys, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"claimall", s, "0", "1", keyFile, strconv.Itoa(passes)}
	if segments {
		args = append(args, "--segments")
	}
	py := startPeer(t, args...)
	if l := py.line(t); l != "ready" {
		t.Fatal(l)
	}
	py.send(t, "go")
	return py
}

// pythonClaims waits for a claimer's result and checks each payload it
// claimed against want; it returns the keys it claimed.
func pythonClaims(t *testing.T, py *pyPeer, want map[string]any) map[string]bool {
	t.Helper()
	var byPython map[string]received
	if err := json.Unmarshal([]byte(py.line(t)), &byPython); err != nil {
		t.Fatal(err)
	}
	py.exit(t)
	claimed := map[string]bool{}
	for key, r := range byPython {
		data, err := hex.DecodeString(r.Data)
		if err != nil {
			t.Fatal(err)
		}
		checkTree(t, key, want[key], decodeReceived(t, &r, data))
		claimed[key] = true
	}
	return claimed
}
