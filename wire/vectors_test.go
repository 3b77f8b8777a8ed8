package wire_test

import (
	"bytes"
	"testing"

	"omnishm/internal/vectortest"
	"omnishm/wire"
)

func TestVectors(t *testing.T) {
	vectortest.Each(t, vectortest.Msgpack, func(t *testing.T, c vectortest.Case, raw []byte) {
		want := vectortest.Want(t, c)
		if err := vectortest.SameValue(mustUnmarshal(t, raw), want); err != nil {
			t.Fatalf("Unmarshal vs JSON: %v", err)
		}
		// Decoded in wire order, the value re-encodes to the very bytes.
		ordered, err := (&wire.Decoder{Ordered: true}).Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		if again := mustMarshal(t, ordered); !bytes.Equal(again, raw) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, raw)
		}
		// Go maps re-encode sorted: that must decode to the same value.
		sorted := mustMarshal(t, mustUnmarshal(t, raw))
		if err := vectortest.SameValue(mustUnmarshal(t, sorted), want); err != nil {
			t.Fatalf("decode(encode(x)) != x: %v", err)
		}
	})
}
