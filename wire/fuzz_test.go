package wire_test

import (
	"testing"

	"omnishm/internal/vectortest"
	"omnishm/wire"
)

// FuzzUnmarshal: any input decodes or fails with ErrCorrupt, and what
// decodes re-encodes to a value that decodes the same. A Reader skips any
// input without panicking, and whatever decodes, exactly to its end.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	unmarshal := func(b []byte) (any, error) {
		wire.NewReader(b).Skip()
		return wire.Unmarshal(b)
	}
	vectortest.FuzzDecoder(f, vectortest.Msgpack, unmarshal, func(t *testing.T, b []byte, v any) {
		if r := wire.NewReader(b); r.Skip() != nil || r.Len() != 0 {
			t.Fatalf("Skip of a value Unmarshal decodes stops %d bytes short", r.Len())
		}
		back := mustUnmarshal(t, mustMarshal(t, v))
		if err := vectortest.SameValue(back, v); err != nil {
			t.Fatalf("round trip changed the value: %v", err)
		}
	}, wire.ErrCorrupt)
}
