package wire_test

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"omnishm/wire"
)

// nested is levels containers, each declaring as many items as the whole
// rest of the input could hold, then pad nils: every level's length passes
// a check against the bytes left, but together they owe far more.
func nested(levels, pad int, header []byte) []byte {
	var b []byte
	for k := range levels {
		n := (levels-k-1)*(len(header)+4) + pad
		if header[0] == 0xdf {
			n /= 2
		}
		b = binary.BigEndian.AppendUint32(append(b, header[0]), uint32(n))
		b = append(b, header[1:]...)
	}
	return append(b, bytes.Repeat([]byte{0xc0}, pad)...)
}

func repeated(elem []byte, n int) []byte {
	b := binary.BigEndian.AppendUint32([]byte{0xdd}, uint32(n))
	return append(b, bytes.Repeat(elem, n)...)
}

// Hostile inputs allocate in proportion to their size: a decoded value may
// cost more than its bytes (a one-entry Go map is some 300 bytes), but never
// a multiple of the input per nesting level or per element.
func TestUnmarshalAllocationIsBounded(t *testing.T) {
	cases := map[string][]byte{
		"nested arrays owe the rest": nested(512, 8<<10, []byte{0xdd}),
		"nested maps owe the rest":   nested(512, 8<<10, []byte{0xdf, 0xa0}),
		"one-entry int-key maps":     repeated([]byte{0x81, 0x00, 0x00}, 1<<14),
		"one-entry string maps":      repeated([]byte{0x81, 0xa0, 0x00}, 1<<14),
		"negative fixints":           repeated([]byte{0xff}, 1<<16),
		"empty arrays":               repeated([]byte{0x90}, 1<<16),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := wire.Unmarshal(in)
			runtime.ReadMemStats(&after)
			got := after.TotalAlloc - before.TotalAlloc
			if limit := 128*uint64(len(in)) + 1<<20; got > limit {
				t.Fatalf("%d input bytes allocated %d (limit %d), err %v", len(in), got, limit, err)
			}
		})
	}
}
