package segment

import (
	"bytes"
	"os/exec"
	"testing"

	"omnishm/internal/shmtest"
)

// These scripts do what the Python SharedMemoryConnector does on the
// per-key path (SPEC §6), with multiprocessing.shared_memory itself.
const (
	pythonPut = `
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
	pythonGet = `
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

func python(t *testing.T, script string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("python3", append([]string{"-c", script}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	return out
}

func TestPythonPeer(t *testing.T) {
	if exec.Command("python3", "-c", "import multiprocessing.shared_memory").Run() != nil {
		t.Skip("python3 with multiprocessing.shared_memory not available")
	}
	for _, size := range []int{1, 4096, 1 << 20} {
		data := payload(size, uint64(size))
		for _, wrapped := range []string{"0", "1"} {
			key := shmtest.Key("frompy")
			python(t, pythonPut, data, key, wrapped)
			if got := mustClaim(t, "", key); !bytes.Equal(got, data) {
				t.Fatalf("size %d wrapped %s: Go claimed different bytes", size, wrapped)
			}
			assertGone(t, DefaultDir, key)
		}

		key := shmtest.Key("topy")
		p := NewProducer(Options{})
		mustPut(t, p, key, data)
		if got := python(t, pythonGet, nil, key); !bytes.Equal(got, data) {
			t.Fatalf("size %d: Python read %d different bytes", size, len(got))
		}
		assertGone(t, DefaultDir, key)
		if p.Cleanup(key) {
			t.Fatal("cleanup retired a key Python consumed")
		}
		p.Close()
	}
}
