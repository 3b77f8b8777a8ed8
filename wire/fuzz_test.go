package wire_test

import (
	"errors"
	"omnishm/internal/vectortest"
	"testing"

	"omnishm/wire"
)

// FuzzUnmarshal: any input decodes or fails with ErrCorrupt, never panics,
// and what decodes re-encodes to a value that decodes the same.
func FuzzUnmarshal(f *testing.F) {
	for _, c := range vectortest.LoadIndex(f) {
		if c.Msgpack != "" {
			f.Add(vectortest.Read(f, c.Msgpack))
		}
	}
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := wire.Unmarshal(b)
		if err != nil {
			if !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("error not wrapping ErrCorrupt: %v", err)
			}
			return
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
