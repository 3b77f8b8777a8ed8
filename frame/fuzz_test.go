package frame_test

import (
	"errors"
	"omnishm/internal/vectortest"
	"testing"

	"omnishm/frame"
	"omnishm/tensor"
)

// FuzzDecode: any bytes decode or fail with ErrCorrupt, never panic or read
// out of bounds; a decoded frame's tensors are valid and re-encode.
func FuzzDecode(f *testing.F) {
	for _, c := range vectortest.LoadIndex(f) {
		if c.Frame != "" {
			f.Add(vectortest.Read(f, c.Frame))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		owned, ownedErr := frame.DecodeOwned(append([]byte(nil), b...))
		v, err := frame.Decode(b)
		if (err == nil) != (ownedErr == nil) {
			t.Fatalf("Decode: %v, DecodeOwned: %v", err, ownedErr)
		}
		if err != nil {
			if !errors.Is(err, frame.ErrCorrupt) {
				t.Fatalf("error not wrapping ErrCorrupt: %v", err)
			}
			return
		}
		if err := vectortest.SameValue(owned, v); err != nil {
			t.Fatalf("DecodeOwned differs from Decode: %v", err)
		}
		p, err := frame.Prepare(v, 0)
		if err != nil {
			t.Fatalf("decoded value does not prepare: %v", err)
		}
		out := make([]byte, p.Size())
		if err := p.Write(out); err != nil {
			t.Fatal(err)
		}
		back, err := frame.Decode(out)
		if !p.Tensors() {
			return // plain msgpack: wire's fuzz target covers it
		}
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if err := vectortest.SameValue(back, v); err != nil {
			t.Fatalf("round trip changed the value: %v", err)
		}
		checkTensors(t, back)
	})
}

func checkTensors(t *testing.T, v any) {
	switch x := v.(type) {
	case *tensor.Tensor:
		if err := x.Validate(); err != nil {
			t.Fatal(err)
		}
	case []any:
		for _, e := range x {
			checkTensors(t, e)
		}
	case map[string]any:
		for _, e := range x {
			checkTensors(t, e)
		}
	case map[any]any:
		for _, e := range x {
			checkTensors(t, e)
		}
	}
}
