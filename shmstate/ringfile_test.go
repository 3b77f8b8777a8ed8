//go:build linux

package shmstate

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"slices"
	"sort"
	"testing"

	"omnishm/ring"
)

// Frame layout constants for buildRing (SPEC §3).
const (
	frameHeaderSize = 16
	kindPadding     = 2
	stateReady      = 0
	stateDone       = 1
)

// frameSpec is one frame for buildRing.
type frameSpec struct {
	key     string
	payload int
	state   byte
	kind    byte
}

// buildRing lays out a whole ring file: header then frames from position 0.
func buildRing(capacity int, pid, start uint64, frames []frameSpec) []byte {
	b := make([]byte, ring.HeaderSize+capacity)
	copy(b, "OMSHMR01")
	le := binary.LittleEndian
	le.PutUint64(b[8:], uint64(capacity))
	le.PutUint64(b[32:], pid)
	le.PutUint64(b[40:], start)
	var head uint64
	for _, f := range frames {
		total := (frameHeaderSize + len(f.key) + f.payload + 15) &^ 15
		fb := b[ring.HeaderSize+int(head):]
		le.PutUint32(fb[0:], uint32(total))
		le.PutUint32(fb[4:], uint32(f.payload))
		fb[8], fb[9] = f.kind, f.state
		le.PutUint16(fb[10:], uint16(len(f.key)))
		copy(fb[frameHeaderSize:], f.key)
		head += uint64(total)
	}
	le.PutUint64(b[16:], head)
	return b
}

func TestRingVector(t *testing.T) {
	b, err := os.ReadFile("../testdata/vectors/ring-4096.bin")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Ready map[string]struct{ Position uint64 }
	}
	j, err := os.ReadFile("../testdata/vectors/ring-4096.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &want); err != nil {
		t.Fatal(err)
	}
	h, frames, err := ring.Parse(b)
	if err != nil || h.Capacity != 4096 || h.CreatorPID == 0 {
		t.Fatalf("header = %+v, %v", h, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(want.Ready))
	for k := range want.Ready {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return want.Ready[keys[i]].Position < want.Ready[keys[j]].Position })
	c := countFrames(frames)
	if c.ready != len(keys) || c.done != 0 || !slices.Equal(c.readyKeys, keys) {
		t.Fatalf("counts = %+v, want ready %v", c, keys)
	}
}

func TestCountFrames(t *testing.T) {
	var specs []frameSpec
	for i := range 12 {
		specs = append(specs, frameSpec{key: string(rune('a' + i)), payload: 3})
	}
	specs[0].state = stateDone
	specs = append(specs, frameSpec{kind: kindPadding, state: stateDone})
	_, frames, err := ring.Parse(buildRing(4096, 1, 2, specs))
	if err != nil {
		t.Fatal(err)
	}
	c := countFrames(frames)
	if c.ready != 11 || c.done != 1 || !slices.Equal(c.readyKeys, []string{"b", "c", "d", "e", "f", "g", "h", "i"}) {
		t.Fatalf("counts = %+v", c)
	}
}
