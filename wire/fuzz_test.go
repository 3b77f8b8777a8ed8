package wire_test

import (
	"errors"
	"fmt"
	"testing"

	"omnishm/internal/vectortest"
	"omnishm/tensor"
	"omnishm/wire"
)

// FuzzUnmarshal: any input decodes or fails with ErrCorrupt, and what
// decodes re-encodes to a value that decodes the same. A Reader skips any
// input without panicking, and whatever decodes, exactly to its end.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	unmarshal := func(b []byte) (any, error) {
		wire.NewReader(b).Skip()
		v, err := wire.Unmarshal(b)
		if _, werr := wire.DecodeWalk(&wire.Decoder{}, b); err != nil && werr == nil {
			panic(fmt.Sprintf("Unmarshal refuses what the general walk decodes: %v", err))
		}
		return v, err
	}
	vectortest.FuzzDecoder(f, vectortest.Msgpack, unmarshal, func(t *testing.T, b []byte, v any) {
		if w, err := wire.DecodeWalk(&wire.Decoder{}, b); err != nil {
			t.Fatalf("the general walk refuses what Unmarshal decodes: %v", err)
		} else if err := vectortest.SameValue(w, v); err != nil {
			t.Fatalf("Unmarshal and the general walk differ: %v", err)
		}
		if r := wire.NewReader(b); r.Skip() != nil || r.Len() != 0 {
			t.Fatalf("Skip of a value Unmarshal decodes stops %d bytes short", r.Len())
		}
		back := mustUnmarshal(t, mustMarshal(t, v))
		if err := vectortest.SameValue(back, v); err != nil {
			t.Fatalf("round trip changed the value: %v", err)
		}
	}, wire.ErrCorrupt)
}

// FuzzDecode: whatever Unmarshal decodes, Decode stores into a struct of
// every kind, a typed map and a slice without panicking, or refuses with
// ErrMismatch; into an any it takes the tree as it is.
func FuzzDecode(f *testing.F) {
	f.Add(mustMarshal(f, map[string]any{"name": "r", "hidden": []float32{1}, "labels": wire.Map{{Key: 1, Value: "a"}}}))
	vectortest.FuzzDecoder(f, vectortest.Msgpack, wire.Unmarshal, func(t *testing.T, _ []byte, v any) {
		for _, into := range []any{new(decodeTarget), new(map[int]string), new([]float32), new([2]int8), new(*tensor.Tensor)} {
			if err := wire.Decode(v, into); err != nil && !errors.Is(err, wire.ErrMismatch) {
				t.Fatalf("Decode into %T: %v", into, err)
			}
		}
		var got any
		if err := wire.Decode(v, &got); err != nil {
			t.Fatal(err)
		}
		if err := vectortest.SameValue(got, v); err != nil {
			t.Fatal(err)
		}
	}, wire.ErrCorrupt)
}
