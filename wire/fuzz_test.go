package wire_test

import (
	"errors"
	"testing"

	"omnishm/internal/vectortest"
	"omnishm/wire"
)

// FuzzUnmarshal: any input decodes or fails with ErrCorrupt, never panics,
// and what decodes re-encodes to a value that decodes the same. A Reader
// skips whatever decodes, to its end, and never panics on the rest.
func FuzzUnmarshal(f *testing.F) {
	vectortest.Seed(f, vectortest.Msgpack)
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := wire.NewReader(b)
		skipErr := r.Skip()
		v, err := wire.Unmarshal(b)
		if err != nil {
			if !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("error not wrapping ErrCorrupt: %v", err)
			}
			return
		}
		if skipErr != nil || r.Len() != 0 {
			t.Fatalf("Skip of a value Unmarshal decodes: %v, %d bytes left", skipErr, r.Len())
		}
		again, err := wire.Marshal(v)
		if err != nil {
			t.Fatalf("decoded value does not encode: %v", err)
		}
		back, err := wire.Unmarshal(again)
		if err != nil {
			t.Fatalf("re-encoded value does not decode: %v", err)
		}
		if err := vectortest.SameValue(back, v); err != nil {
			t.Fatalf("round trip changed the value: %v", err)
		}
	})
}
