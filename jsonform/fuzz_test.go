package jsonform

import (
	"bytes"
	"testing"

	"omnishm/internal/vectortest"
)

// FuzzUnmarshal: any input gives a value or an error wrapping ErrInvalid,
// never a panic, and a value read is printed in a form that reads back to
// the same text.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"$tensor":{"dtype":"int8","shape":[1],"data":"AA=="}}`))
	f.Add([]byte(`{"$ext":{"code":-1,"data":""}}`))
	f.Add([]byte(`[1e400,-0.0,18446744073709551615]`))
	vectortest.FuzzDecoder(f, vectortest.JSON, Unmarshal, func(t *testing.T, in []byte, v any) {
		first, _, second, err := reprint(v)
		if err != nil {
			t.Fatalf("a value read from %q: %v", in, err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("not a fixed point:\n%s\n%s", first, second)
		}
	}, ErrInvalid)
}
