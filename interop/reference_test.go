//go:build linux

package interop

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/internal/vectortest"
	"omnishm/jsonform"
	"omnishm/ring"
)

// seedFiles are where the project's shared folder (the seed) may be: beside
// the repository, as CI lays it, or at the workspace's path.
var seedFiles = []string{"../../shared/seed/000_7f37ef3b70f9d6d4.txt", "/work/shared/seed/000_7f37ef3b70f9d6d4.txt"}

// The peer runs the seed's shm_ring.py: testdata/shm_ring_peer.py must be it,
// byte for byte, apart from the added comment line and its two imports.
func TestPeerIsTheSeedsCode(t *testing.T) {
	var seed []byte
	var err error
	for _, f := range seedFiles {
		if seed, err = os.ReadFile(f); err == nil {
			break
		}
	}
	if err != nil {
		t.Skipf("seed not available: %v", err)
	}
	const file = "vllm_omni/distributed/omni_connectors/connectors/shm_ring.py\n"
	i := strings.Index(string(seed), file)
	if i < 0 {
		t.Fatal("shm_ring.py not in the seed")
	}
	var want []string
	for _, line := range strings.Split(string(seed[i+len(file):]), "\n")[2:] {
		if !strings.HasPrefix(line, "+") {
			break
		}
		want = append(want, line[1:])
	}
	copied, err := os.ReadFile(filepath.Join("testdata", "shm_ring_peer.py"))
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{
		"from ..utils.logging import get_connector_logger":                "from peer import get_connector_logger",
		"from ..utils.tensor_frame import TensorFrame, read_tensor_frame": "from peer import TensorFrame, read_tensor_frame",
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSuffix(string(copied), "\n"), "\n") {
		if strings.HasPrefix(line, "# Reference implementation:") {
			continue
		}
		for orig, shim := range imports {
			if strings.HasPrefix(line, shim+"  # seed: ") {
				line = orig
			}
		}
		got = append(got, line)
	}
	if len(got) != len(want) || len(want) < 400 {
		t.Fatalf("copy has %d lines, the seed's shm_ring.py %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d differs:\n copy %q\n seed %q", i+1, got[i], want[i])
		}
	}
}

// The Python reference's own scan of ring-4096.bin (a wrapped ring with a
// padding frame, written by the seed) lists the same ready frames as
// ring-4096.json and ring.Parse, and their payloads decode to the cases.
func TestRingVectorThroughPythonScan(t *testing.T) {
	file := vectortest.Read(t, "ring-4096.bin")
	var index struct {
		Ready map[string]struct {
			Case     string `json:"case"`
			Position uint64 `json:"position"`
			Size     int    `json:"size"`
		} `json:"ready"`
	}
	if err := json.Unmarshal(vectortest.Read(t, "ring-4096.json"), &index); err != nil {
		t.Fatal(err)
	}
	_, frames, err := ring.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	goFrames := map[string]ring.FrameInfo{}
	for _, f := range frames {
		if !f.Done && f.Key != "" {
			goFrames[f.Key] = f
		}
	}

	cases := map[string]vectortest.Case{}
	for _, c := range vectortest.LoadIndex(t) {
		cases[c.Name] = c
	}
	out := runPeer(t, "scan", vectortest.Path(t, "ring-4096.bin"))
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		var f struct {
			Key      string `json:"key"`
			Position uint64 `json:"position"`
			Kind     int    `json:"kind"`
			Size     int    `json:"size"`
			Data     string `json:"data"`
		}
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("scan printed %q: %v", line, err)
		}
		seen[f.Key] = true
		want, ok := index.Ready[f.Key]
		if !ok || want.Position != f.Position || want.Size != f.Size {
			t.Errorf("Python scan: %s at %d size %d; ring-4096.json: %+v", f.Key, f.Position, f.Size, want)
			continue
		}
		g, ok := goFrames[f.Key]
		if !ok || g.Position != f.Position || g.PayloadLen != f.Size || int(g.Kind) != f.Kind {
			t.Errorf("Python scan: %s at %d kind %d size %d; ring.Parse: %+v", f.Key, f.Position, f.Kind, f.Size, g)
		}
		data, err := hex.DecodeString(f.Data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeKind(f.Kind, data)
		if err != nil {
			t.Fatalf("%s: %v", f.Key, err)
		}
		// The JSON form is the comparison: the reference printed it.
		if err := printsAs(t, got, cases[want.Case]); err != nil {
			t.Errorf("%s (%s): %v", f.Key, want.Case, err)
		}
	}
	if len(seen) != len(index.Ready) || len(goFrames) != len(index.Ready) {
		t.Fatalf("Python scan listed %d frames, ring.Parse %d, ring-4096.json %d", len(seen), len(goFrames), len(index.Ready))
	}
}

// The reference vectors (tensor frames and msgpack made by the real Python
// code, with torch) travel through a Python producer's ring to a Go
// connector, which decodes each to its case's value.
func TestReferenceVectorsThroughPythonRing(t *testing.T) {
	type sent struct {
		key, kind string
		c         vectortest.Case
	}
	var (
		all  []sent
		args = []string{"put", shmtest.Scope(t), "0", "1"}
	)
	s := args[1]
	for _, c := range vectortest.LoadIndex(t) {
		for kind, form := range map[string]vectortest.Form{"1": vectortest.Frame, "0": vectortest.Msgpack} {
			file := c.File(form)
			if file == "" {
				continue
			}
			key := shmtest.Key(c.Name + "-" + form.String())
			all = append(all, sent{key, kind, c})
			args = append(args, key, kind, hexFile(t, vectortest.Read(t, file)))
		}
	}
	if len(all) < 40 {
		t.Fatalf("only %d vectors", len(all))
	}
	py := startPeer(t, args...)
	for _, v := range all {
		if d := conntest.ParseDescriptor(t, py.line(t), v.key); d.HostRing == nil {
			t.Fatalf("%s: not in the ring", v.key)
		}
	}
	py.expect(t, "ready")
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	for _, v := range all {
		got, _ := getEventually(t, receiver, v.key, nil)
		if err := printsAs(t, got, v.c); err != nil {
			t.Errorf("%s (kind %s): %v", v.c.Name, v.kind, err)
		}
	}
	py.finish(t, "close")
}

// printsAs reports whether got prints in the JSON form (SPEC §10) as the
// Python reference printed the case's value, byte for byte.
func printsAs(t *testing.T, got any, c vectortest.Case) error {
	t.Helper()
	text, err := jsonform.Marshal(got)
	if err != nil {
		return err
	}
	if want := vectortest.WantText(t, c); !bytes.Equal(text, want) {
		return fmt.Errorf("decoded %.300s\n want %.300s", text, want)
	}
	return nil
}
