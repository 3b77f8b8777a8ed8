package wire_test

import (
	"bytes"
	"omnishm/internal/vectortest"
	"omnishm/wire"
	"testing"
)

func TestVectors(t *testing.T) {
	for _, c := range vectortest.LoadIndex(t) {
		if c.Msgpack == "" {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			raw := vectortest.Read(t, c.Msgpack)
			got, err := wire.Unmarshal(raw)
			if err != nil {
				t.Fatal(err)
			}
			want := vectortest.FromJSON(t, vectortest.Read(t, c.JSON))
			if err := vectortest.SameValue(got, want); err != nil {
				t.Fatalf("Unmarshal vs JSON: %v", err)
			}
			// Decoded in wire order, the value re-encodes to the very bytes.
			ordered, err := (&wire.Decoder{Ordered: true}).Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			again, err := wire.Marshal(ordered)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, raw) {
				t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, raw)
			}
			// Go maps re-encode sorted: that must decode to the same value.
			sorted, err := wire.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			back, err := wire.Unmarshal(sorted)
			if err != nil {
				t.Fatal(err)
			}
			if err := vectortest.SameValue(back, want); err != nil {
				t.Fatalf("decode(encode(x)) != x: %v", err)
			}
		})
	}
}
