package ring

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// The seed's own shm_ring.py, run by python3, is the peer of these tests.
// The interop package keeps the verbatim copy; its imports point at that
// package's shims, so they are turned back into the seed's here.
func seedRing(t *testing.T) string {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not available")
	}
	peer, err := os.ReadFile("../interop/testdata/shm_ring_peer.py")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, line := range strings.Split(string(peer), "\n") {
		switch {
		case strings.HasPrefix(line, "from peer import get_connector_logger"):
			line = "from ..utils.logging import get_connector_logger"
		case strings.HasPrefix(line, "from peer import TensorFrame"):
			line = "from ..utils.tensor_frame import TensorFrame, read_tensor_frame"
		}
		src.WriteString(line + "\n")
	}
	dir := t.TempDir()
	pkg := filepath.Join(dir, "omni")
	for _, d := range []string{"connectors", "utils"} {
		if err := os.MkdirAll(filepath.Join(pkg, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"__init__.py":            "",
		"connectors/__init__.py": "",
		"utils/__init__.py":      "",
		"connectors/shm_ring.py": src.String(),
		"utils/logging.py":       "import logging\ndef get_connector_logger(name):\n    return logging.getLogger(name)\n",
		// Kind-1 frames are passed through as bytes: this peer tests the ring.
		"utils/tensor_frame.py": "class TensorFrame:\n    pass\ndef read_tensor_frame(view):\n    return ('tensors', bytes(view))\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	driver := `
import json, sys
sys.path.insert(0, sys.argv[1])
from omni.connectors.shm_ring import HostRingTransport
ring = HostRingTransport(sys.argv[2], int(sys.argv[3]))
print("ready", flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "put":
        print(json.dumps(ring.put(cmd["from"], cmd["to"], cmd["key"], bytes.fromhex(cmd["data"]))), flush=True)
    elif cmd["op"] == "get":
        got = ring.get(cmd["from"], cmd["to"], cmd["key"], cmd.get("desc"))
        if got is not None and isinstance(got[0], tuple):
            got = (got[0][1], got[1])
        print(json.dumps(None if got is None else {"data": got[0].hex(), "size": got[1]}), flush=True)
    elif cmd["op"] == "close":
        ring.close()
        print("closed", flush=True)
    elif cmd["op"] == "exit":
        import os
        os._exit(0)
`
	if err := os.WriteFile(filepath.Join(dir, "driver.py"), []byte(driver), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type pyPeer struct {
	cmd *exec.Cmd
	in  *json.Encoder
	out *bufio.Scanner
}

func startPython(t *testing.T, dir, sc string) *pyPeer {
	cmd := exec.Command("python3", filepath.Join(dir, "driver.py"), dir, scope.New(sc).WakeDir, "4096")
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &pyPeer{cmd: cmd, in: json.NewEncoder(in), out: bufio.NewScanner(out)}
	if l := p.line(t); l != "ready" {
		t.Fatalf("python: %q", l)
	}
	return p
}

func (p *pyPeer) line(t *testing.T) string {
	t.Helper()
	done := make(chan bool, 1)
	go func() { done <- p.out.Scan() }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("python peer ended")
		}
	case <-time.After(wait):
		t.Fatal("python peer silent")
	}
	return p.out.Text()
}

func (p *pyPeer) do(t *testing.T, cmd map[string]any) string {
	t.Helper()
	if err := p.in.Encode(cmd); err != nil {
		t.Fatal(err)
	}
	return p.line(t)
}

// pyDesc is what the Python peer prints: the host_ring handle.
type pyDesc = descriptor.RingHandle

func TestPythonPeer(t *testing.T) {
	dir := seedRing(t)
	t.Run("go producer, python receiver", func(t *testing.T) {
		sc := shmtest.Scope(t)
		py := startPython(t, dir, sc)
		p := newTransport(t, sc, 4096)
		for i := range 40 { // wraps a 4096-byte ring several times
			key := "g" + strings.Repeat("x", i%7) + "_" + string(rune('a'+i%26))
			d := mustPut(t, p, "0", "1", key, codes(i))
			var desc any
			if i%2 == 0 {
				desc = d
			}
			got := py.do(t, map[string]any{"op": "get", "from": "0", "to": "1", "key": key, "desc": desc})
			want := `{"data": "` + hex.EncodeToString(codes(i)) + `", "size": 448}`
			if got != want {
				t.Fatalf("python got %.80s", got)
			}
		}
		mustPut(t, p, "0", "1", "pending", []byte("p"))
		p.Close()
		if got := py.do(t, map[string]any{"op": "get", "from": "0", "to": "1", "key": "pending"}); got != "null" {
			t.Fatalf("python read a closed producer's frame: %s", got)
		}
		py.do(t, map[string]any{"op": "close"})
	})
	t.Run("python producer, go receiver", func(t *testing.T) {
		sc := shmtest.Scope(t)
		py := startPython(t, dir, sc)
		r := newTransport(t, sc, 4096)
		for i := range 40 {
			key := "p_" + string(rune('a'+i%26)) + strings.Repeat("y", i%5)
			var d pyDesc
			if err := json.Unmarshal([]byte(py.do(t, map[string]any{"op": "put", "from": "0", "to": "1", "key": key, "data": hex.EncodeToString(codes(i))})), &d); err != nil || d.Name == "" {
				t.Fatalf("python put: %v", err)
			}
			var desc *descriptor.RingHandle
			if i%2 == 1 {
				desc = &d
			}
			if got := mustGet(t, r, "0", "1", key, desc); string(got) != string(codes(i)) {
				t.Fatalf("go got wrong bytes for %s", key)
			}
		}
		// replace + cancel by the python producer are seen by the Go reader
		py.do(t, map[string]any{"op": "put", "from": "0", "to": "1", "key": "re", "data": "01"})
		py.do(t, map[string]any{"op": "put", "from": "0", "to": "1", "key": "re", "data": "02"})
		if got := mustGet(t, r, "0", "1", "re", nil); got[0] != 2 {
			t.Fatalf("got %v", got)
		}
		mustMiss(t, r, "0", "1", "re", nil)
		// a python producer that exits without close: its frame is never read
		var d pyDesc
		json.Unmarshal([]byte(py.do(t, map[string]any{"op": "put", "from": "0", "to": "1", "key": "orphan", "data": "0b"})), &d)
		py.in.Encode(map[string]any{"op": "exit"})
		py.cmd.Wait()
		t.Cleanup(func() {
			os.Remove(scope.ShmDir + "/" + d.Name)
			os.Remove(scope.New(sc).RingDir() + "/" + d.Name)
			os.Remove(scope.New(sc).RingDir())
		})
		mustMiss(t, r, "0", "1", "orphan", &d)
		mustMiss(t, r, "0", "1", "orphan", nil)
	})
}
