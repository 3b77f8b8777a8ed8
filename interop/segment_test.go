package interop

import (
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/tensor"
	"omnishm/wire"
)

// A Go connector's per-key segments (the ring disabled, or a payload larger
// than a quarter of the ring) are claimed by a Python reader that follows
// SPEC §6 with multiprocessing.shared_memory; it removes segment and lock
// file, and the Go side then misses.
func TestGoSegmentToPython(t *testing.T) {
	big := make([]float32, 300_000) // 1.2 MB: over capacity/4 of the default ring
	for i := range big {
		big[i] = float32(i) / 7
	}
	cases := []struct {
		name      string
		ringBytes int
		want      any
	}{
		{"ring-disabled", connector.NoRing, tensorPayload(9)},
		{"ring-disabled-plain", connector.NoRing, plainPayload(10, false)},
		{"too-large-for-ring", ring.DefaultCapacity, map[string]any{"hidden": must(tensor.FromSlice(big, 1000, 300))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := shmtest.Scope(t)
			sender := conntest.Open(t, s, "0", c.ringBytes)
			receiver := conntest.Open(t, s, "1", c.ringBytes)
			key := shmtest.Key("seg")
			size, d, err := sender.Put("0", "1", key, c.want)
			if err != nil {
				t.Fatal(err)
			}
			if d.Shm == nil || d.Shm.Name != key || d.Shm.Size != size {
				t.Fatalf("descriptor %v, want a per-key one for %s", d, key)
			}
			r, data := parseReceived(t, runPeer(t, "segget", key, "--timeout", "10"))
			if r == nil {
				t.Fatal("the Python per-key reader missed a Go segment")
			}
			if r.Size != size {
				t.Fatalf("Python read %d bytes, Go wrote %d", r.Size, size)
			}
			got, err := wire.Unmarshal(data)
			if err != nil {
				t.Fatal(err)
			}
			checkTree(t, key, c.want, got)
			absent(t, scope.Path(key), lockPath(key))
			missing(t, receiver, key, nil)
			missing(t, receiver, key, &d)
		})
	}
}

// A Python per-key producer's segment (SPEC §6 lock protocol, created with
// multiprocessing.shared_memory) is claimed by a Go connector by key and by
// descriptor, with the ring disabled or enabled (the ring misses, then the
// per-key path answers), in the plain form and in the OMNIIPC1 form.
func TestPythonSegmentToGo(t *testing.T) {
	cases := []struct {
		name      string
		ringBytes int
		byDesc    bool
		wrap      bool
	}{
		{"ring=0", connector.NoRing, false, false},
		{"ring=0/descriptor", connector.NoRing, true, false},
		{"ring=default", ring.DefaultCapacity, false, false},
		{"ring=default/descriptor", ring.DefaultCapacity, true, false},
		{"ring=0/OMNIIPC1", connector.NoRing, false, true},
		{"ring=default/OMNIIPC1/descriptor", ring.DefaultCapacity, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := shmtest.Scope(t)
			key := shmtest.Key("pyseg")
			want := plainPayload(11, true)
			data := plainBytes(t, want)
			args := []string{"segput", key, hexFile(t, data)}
			if c.wrap {
				args = append(args, "--wrap")
			}
			py := startPeer(t, args...)
			d := parseDesc(t, py.line(t), key)
			if d.Shm == nil || d.Shm.Name != key {
				t.Fatalf("descriptor %v", d)
			}
			receiver := conntest.Open(t, s, "1", c.ringBytes)
			var desc *connector.Descriptor
			if c.byDesc {
				desc = d
			}
			got, size, ok, err := receiver.Get("0", "1", key, desc)
			if err != nil || !ok {
				t.Fatalf("Go get of a Python segment: ok=%v err=%v", ok, err)
			}
			if size != len(data) {
				t.Fatalf("size %d, want the payload's %d", size, len(data))
			}
			checkTree(t, key, want, got)
			absent(t, scope.Path(key), lockPath(key))
			missing(t, receiver, key, nil)
			if r, _ := parseReceived(t, runPeer(t, "segget", key, "--timeout", "0")); r != nil {
				t.Fatalf("Python claimed it again: %+v", r)
			}
			py.send(t, "close")
			if l := py.line(t); l != "closed" {
				t.Fatal(l)
			}
			py.exit(t)
			absent(t, scope.Path(key), lockPath(key))
		})
	}
}
