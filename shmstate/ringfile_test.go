package shmstate

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"sort"
	"testing"
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
	b := make([]byte, ringHeaderSize+capacity)
	copy(b, ringMagic)
	le := binary.LittleEndian
	le.PutUint64(b[8:], uint64(capacity))
	le.PutUint64(b[32:], pid)
	le.PutUint64(b[40:], start)
	var head uint64
	for _, f := range frames {
		total := (frameHeaderSize + len(f.key) + f.payload + 15) &^ 15
		fb := b[ringHeaderSize+int(head):]
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
		Head, Tail uint64
		Ready      map[string]struct{ Position uint64 }
	}
	j, err := os.ReadFile("../testdata/vectors/ring-4096.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &want); err != nil {
		t.Fatal(err)
	}
	h, err := parseRingHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.capacity != 4096 || h.head != want.Head || h.tail != want.Tail {
		t.Fatalf("header = %+v, want capacity 4096 head %d tail %d", h, want.Head, want.Tail)
	}
	c, err := countFrames(b, h)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(want.Ready))
	for k := range want.Ready {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return want.Ready[keys[i]].Position < want.Ready[keys[j]].Position })
	if c.ready != len(keys) || !slices.Equal(c.readyKeys, keys) {
		t.Fatalf("ready = %d %v, want %v", c.ready, c.readyKeys, keys)
	}
}

func TestCountFrames(t *testing.T) {
	b := buildRing(4096, 1, 2, []frameSpec{
		{key: "a", payload: 10, state: stateDone},
		{key: "b", payload: 100, state: stateReady},
		{payload: 0, state: stateDone, kind: kindPadding},
		{key: "c", payload: 0, state: stateReady, kind: 1},
	})
	h, err := parseRingHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := countFrames(b, h)
	if err != nil {
		t.Fatal(err)
	}
	if c.ready != 2 || c.done != 1 || !slices.Equal(c.readyKeys, []string{"b", "c"}) {
		t.Fatalf("counts = %+v", c)
	}
	if h.head != 32+128+16+32 || h.creatorPID != 1 || h.creatorStart != 2 {
		t.Fatalf("header = %+v", h)
	}
}

func TestCorruptRings(t *testing.T) {
	le := binary.LittleEndian
	good := func() []byte { return buildRing(4096, 1, 2, []frameSpec{{key: "k", payload: 8}}) }
	cases := []struct {
		name   string
		mangle func([]byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:40] }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"capacity", func(b []byte) []byte { le.PutUint64(b[8:], 8192); return b }},
		{"tail after head", func(b []byte) []byte { le.PutUint64(b[24:], 64); return b }},
		{"window over capacity", func(b []byte) []byte { le.PutUint64(b[16:], 8192); return b }},
		{"zero total", func(b []byte) []byte { le.PutUint32(b[64:], 0); return b }},
		{"unaligned total", func(b []byte) []byte { le.PutUint32(b[64:], 24); return b }},
		{"total past head", func(b []byte) []byte { le.PutUint32(b[64:], 64); return b }},
		{"key overruns", func(b []byte) []byte { le.PutUint16(b[64+10:], 200); return b }},
		{"payload overruns", func(b []byte) []byte { le.PutUint32(b[64+4:], 1<<31); return b }},
		{"header crosses end", func(b []byte) []byte {
			le.PutUint64(b[16:], 4096+8)
			le.PutUint64(b[24:], 4088)
			return b
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mangle(good())
			h, err := parseRingHeader(b)
			if err == nil {
				_, err = countFrames(b, h)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func FuzzCountFrames(f *testing.F) {
	if b, err := os.ReadFile("../testdata/vectors/ring-4096.bin"); err == nil {
		f.Add(b)
	}
	f.Add(buildRing(256, 1, 2, []frameSpec{{key: "k", payload: 8}, {key: "j", payload: 3, state: stateDone}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseRingHeader(b)
		if err != nil {
			return
		}
		c, err := countFrames(b, h)
		if err == nil && uint64(c.ready+c.done)*frameHeaderSize > h.head-h.tail {
			t.Fatalf("%d frames in a %d-byte window", c.ready+c.done, h.head-h.tail)
		}
	})
}

func TestParseStartTime(t *testing.T) {
	cases := []struct {
		stat string
		want uint64
		ok   bool
	}{
		{"42 (sh) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10", 12345, true},
		{"42 (a) b) c) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 777 1000 10", 777, true},
		{"42 (sh) S 1 2", 0, false},
		{"garbage", 0, false},
	}
	for _, tc := range cases {
		got, err := parseStartTime([]byte(tc.stat))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseStartTime(%q) = %d, %v; want %d ok=%v", tc.stat, got, err, tc.want, tc.ok)
		}
	}
}
