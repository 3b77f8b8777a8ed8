package jsonform

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzUnmarshal: any input gives a value or an error wrapping ErrInvalid,
// never a panic, and a value read is printed in a form that reads back to
// the same text.
func FuzzUnmarshal(f *testing.F) {
	files, _ := filepath.Glob("../testdata/vectors/*.json")
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil && len(b) < 4096 {
			f.Add(b)
		}
	}
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
		first, err := Marshal(v)
		if err != nil {
			t.Fatalf("Marshal of a value read from %q: %v", in, err)
		}
		back, err := Unmarshal(first)
		if err != nil {
			t.Fatalf("Unmarshal(%s) of Marshal's output: %v", first, err)
		}
		second, err := Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("not a fixed point:\n%s\n%s", first, second)
		}
	})
}
