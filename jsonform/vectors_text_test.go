package jsonform

import (
	"bytes"
	"testing"

	"omnishm/internal/vectortest"
)

// TestVectorTexts reads every JSON text the Python reference printed and
// checks that Marshal prints the value read back byte for byte the same:
// floats as repr, keys sorted, ASCII escapes as json.dumps makes them.
func TestVectorTexts(t *testing.T) {
	vectortest.Each(t, vectortest.JSON, func(t *testing.T, c vectortest.Case, _ []byte) {
		text := vectortest.WantText(t, c)
		v, err := Unmarshal(text)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, text) {
			t.Errorf("Marshal(Unmarshal(%s)) differs:\n got %.300s\nwant %.300s", c.JSON, got, text)
		}
	})
}
