package frame_test

import (
	"bytes"
	"testing"

	"omnishm/frame"
	"omnishm/internal/vectortest"
	"omnishm/jsonform"
	"omnishm/wire"
)

// Printed in SPEC §10's JSON form, both decodings of every vector are the
// reference's C.json, byte for byte.
func TestVectorsPrintAsReferenceJSON(t *testing.T) {
	decoders := map[vectortest.Form]func([]byte) (any, error){vectortest.Msgpack: wire.Unmarshal, vectortest.Frame: frame.Decode}
	for form, decode := range decoders {
		t.Run(form.String(), func(t *testing.T) {
			vectortest.Each(t, form, func(t *testing.T, c vectortest.Case, b []byte) {
				v, err := decode(b)
				if err != nil {
					t.Fatal(err)
				}
				got, err := jsonform.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				if want := vectortest.WantText(t, c); !bytes.Equal(got, want) {
					t.Fatalf("%s prints\n%.300s\nwant\n%.300s", c.File(form), got, want)
				}
			})
		})
	}
}
