package vectortest

import (
	"errors"
	"testing"
)

// FuzzDecoder is the fuzz target every decoder of bytes from another
// process has: seeded with the vectors of form (and whatever f already
// holds), it decodes each input, which must give a value or an error
// wrapping one of refusals (bad input is refused, never a panic or a read
// out of bounds), and hands each value decoded to check.
func FuzzDecoder(f *testing.F, form Form, decode func([]byte) (any, error), check func(t *testing.T, b []byte, v any), refusals ...error) {
	f.Helper()
	Seed(f, form)
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decode(b)
		if err != nil {
			for _, r := range refusals {
				if errors.Is(err, r) {
					return
				}
			}
			t.Fatalf("error wrapping none of %v: %v", refusals, err)
		}
		check(t, b, v)
	})
}
