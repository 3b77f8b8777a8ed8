package frame_test

import (
	"bytes"
	"omnishm/internal/vectortest"
	"testing"

	"omnishm/frame"
	"omnishm/jsonform"
	"omnishm/wire"
)

// Printed in SPEC §10's JSON form, both decodings of every vector are the
// reference's C.json, byte for byte.
func TestVectorsPrintAsReferenceJSON(t *testing.T) {
	for _, c := range vectortest.LoadIndex(t) {
		t.Run(c.Name, func(t *testing.T) {
			want := bytes.TrimSpace(vectortest.Read(t, c.JSON))
			decoded := map[string]func([]byte) (any, error){}
			if c.Msgpack != "" {
				decoded[c.Msgpack] = wire.Unmarshal
			}
			if c.Frame != "" {
				decoded[c.Frame] = frame.Decode
			}
			for file, decode := range decoded {
				v, err := decode(vectortest.Read(t, file))
				if err != nil {
					t.Fatal(err)
				}
				got, err := jsonform.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(bytes.TrimSpace(got), want) {
					t.Fatalf("%s prints\n%.300s\nwant\n%.300s", file, got, want)
				}
			}
		})
	}
}
