package jsonform

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestVectorTexts reads every JSON text the Python reference printed and
// checks that Marshal prints the value read back byte for byte the same:
// floats as repr, keys sorted, ASCII escapes as json.dumps makes them.
func TestVectorTexts(t *testing.T) {
	files, err := filepath.Glob("../testdata/vectors/*.json")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		base := filepath.Base(f)
		if base == "index.json" || base == "ring-4096.json" {
			continue
		}
		n++
		t.Run(base, func(t *testing.T) {
			text, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text = bytes.TrimSuffix(text, []byte("\n"))
			v, err := Unmarshal(text)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, text) {
				t.Errorf("Marshal(Unmarshal(%s)) differs:\n got %.300s\nwant %.300s", base, got, text)
			}
		})
	}
	if n < 20 {
		t.Fatalf("found only %d vector texts", n)
	}
}
