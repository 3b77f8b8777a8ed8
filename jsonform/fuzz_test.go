package jsonform

import (
	"bytes"
	"errors"
	"testing"

	"omnishm/internal/vectortest"
)

// FuzzUnmarshal: any input gives a value or an error wrapping ErrInvalid,
// never a panic, and a value read is printed in a form that reads back to
// the same text.
func FuzzUnmarshal(f *testing.F) {
	vectortest.Seed(f, vectortest.JSON)
	f.Add([]byte(`{"$tensor":{"dtype":"int8","shape":[1],"data":"AA=="}}`))
	f.Add([]byte(`{"$ext":{"code":-1,"data":""}}`))
	f.Add([]byte(`[1e400,-0.0,18446744073709551615]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := Unmarshal(in)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Unmarshal(%q): error %v does not wrap ErrInvalid", in, err)
			}
			return
		}
		first, _, second, err := reprint(v)
		if err != nil {
			t.Fatalf("a value read from %q: %v", in, err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("not a fixed point:\n%s\n%s", first, second)
		}
	})
}
