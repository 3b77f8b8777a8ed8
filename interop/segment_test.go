//go:build linux

package interop

import (
	"bytes"
	"os/exec"
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/segment"
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
			shmtest.AssertAbsent(t, conntest.KeyFiles(key)...)
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
			d := conntest.ParseDescriptor(t, py.line(t), key)
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
			shmtest.AssertAbsent(t, conntest.KeyFiles(key)...)
			missing(t, receiver, key, nil)
			if r, _ := parseReceived(t, runPeer(t, "segget", key, "--timeout", "0")); r != nil {
				t.Fatalf("Python claimed it again: %+v", r)
			}
			py.finish(t, "close")
			shmtest.AssertAbsent(t, conntest.KeyFiles(key)...)
		})
	}
}

// These scripts do what the Python SharedMemoryConnector does on the
// per-key path (SPEC §6), with multiprocessing.shared_memory itself: the
// segment package's own producer and Claim meet them directly, without a
// connector.
const (
	pythonSegPut = `
import binascii, fcntl, struct, sys
from multiprocessing import resource_tracker, shared_memory
key, wrapped = sys.argv[1], sys.argv[2] == "1"
data = sys.stdin.buffer.read()
if wrapped:
    data = struct.pack(">8sQI", b"OMNIIPC1", len(data), binascii.crc32(data) & 0xFFFFFFFF) + data
with open(f"/dev/shm/shm_{key}_lockfile.lock", "wb+") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    shm = shared_memory.SharedMemory(name=key, create=True, size=len(data))
    shm.buf[: len(data)] = data
    # The receiver owns it now; keep the tracker from unlinking it at exit.
    resource_tracker.unregister(shm._name, "shared_memory")
    shm.close()
    fcntl.flock(lock, fcntl.LOCK_UN)
`
	pythonSegGet = `
import fcntl, os, sys
from multiprocessing import shared_memory
key = sys.argv[1]
size = os.stat(f"/dev/shm/{key}").st_size
lock_file = f"/dev/shm/shm_{key}_lockfile.lock"
with open(lock_file, "rb+") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    shm = shared_memory.SharedMemory(name=key)
    data = bytes(shm.buf[:size])
    shm.close()
    shm.unlink()
    os.remove(lock_file)
sys.stdout.buffer.write(data)
`
)

// pythonScript runs script with python3 (skipping the test without one that
// has multiprocessing.shared_memory) and returns its stdout.
func pythonScript(t *testing.T, script string, stdin []byte, args ...string) []byte {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil || exec.Command(python, "-c", "import multiprocessing.shared_memory").Run() != nil {
		t.Skip("python3 with multiprocessing.shared_memory not available")
	}
	argv := append(append(pythonFlags[:len(pythonFlags):len(pythonFlags)], "-c", script), args...)
	return runPython(t, python, argv, stdin)
}

// The segment package against multiprocessing.shared_memory: a Python
// producer's segment, plain or OMNIIPC1-wrapped, is claimed by
// segment.Claim; a segment.Producer's is read by a Python receiver, after
// which the producer has nothing left to retire.
func TestSegmentPackageWithPython(t *testing.T) {
	for _, size := range []int{1, 4096, 1 << 20} {
		data := shmtest.Payload(size, uint64(size))
		for _, wrapped := range []string{"0", "1"} {
			key := shmtest.Key("frompy")
			pythonScript(t, pythonSegPut, data, key, wrapped)
			got, ok, err := segment.Claim("", key)
			if err != nil || !ok || !bytes.Equal(got, data) {
				t.Fatalf("size %d wrapped %s: Go claimed %d bytes, ok=%v err=%v", size, wrapped, len(got), ok, err)
			}
			shmtest.AssertAbsent(t, conntest.KeyFiles(key)...)
		}

		key := shmtest.Key("topy")
		p := segment.NewProducer(segment.Options{})
		d, err := p.Put(key, data)
		if err != nil {
			t.Fatal(err)
		}
		if got := pythonScript(t, pythonSegGet, nil, key); !bytes.Equal(got, data) {
			t.Fatalf("size %d: Python read %d different bytes", size, len(got))
		}
		shmtest.AssertAbsent(t, conntest.KeyFiles(key)...)
		if claimed, err := p.Claimed(d); !claimed || err != nil {
			t.Fatalf("Claimed after Python read it: %v, %v", claimed, err)
		}
		if ok, err := p.Cleanup(key); ok || err != nil {
			t.Fatalf("cleanup of a key Python consumed: %v, %v", ok, err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
