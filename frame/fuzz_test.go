package frame_test

import (
	"bytes"
	"fmt"
	"testing"

	"omnishm/frame"
	"omnishm/internal/vectortest"
	"omnishm/tensor"
)

// FuzzDecode: any bytes decode or fail with ErrCorrupt, never panic or read
// out of bounds (nor does Detect); the header's quick reader agrees with
// the full one wherever it takes a header; a decoded frame's tensors are valid and
// re-encode to a frame Detect recognises. DecodeOwned and DecodeInto (with
// room for every tensor) agree with Decode, and a DecodeInto that fails
// leaves the supplied memory untouched.
func FuzzDecode(f *testing.F) {
	decode := func(b []byte) (any, error) {
		frame.Detect(b)
		if _, err := frame.HeaderPathsAgree(b); err != nil {
			return nil, err
		}
		owned, ownedErr := frame.DecodeOwned(append([]byte(nil), b...))
		// The data fits the input; each tensor adds at most 63 bytes of
		// alignment and takes at least 4 header bytes.
		supplied := make([]byte, 17*len(b)+64)
		into, intoErr := frame.DecodeInto(b, frame.NewArena(supplied))
		v, err := frame.Decode(b)
		if (err == nil) != (ownedErr == nil) || (err == nil) != (intoErr == nil) {
			return nil, fmt.Errorf("Decode: %v, DecodeOwned: %v, DecodeInto: %v", err, ownedErr, intoErr)
		}
		if err != nil {
			if !bytes.Equal(supplied, make([]byte, len(supplied))) {
				return nil, fmt.Errorf("DecodeInto wrote the supplied memory and failed: %v", intoErr)
			}
			return v, err
		}
		if err := vectortest.SameValue(owned, v); err != nil {
			return nil, fmt.Errorf("DecodeOwned differs from Decode: %v", err)
		}
		if err := vectortest.SameValue(into, v); err != nil {
			return nil, fmt.Errorf("DecodeInto differs from Decode: %v", err)
		}
		return v, err
	}
	vectortest.FuzzDecoder(f, vectortest.Frame, decode, func(t *testing.T, _ []byte, v any) {
		p, out := encode(t, v, 0)
		back, err := frame.Decode(out)
		if !p.Tensors() {
			return // plain msgpack: wire's fuzz target covers it
		}
		if err != nil || !frame.Detect(out) {
			t.Fatalf("re-encoded frame does not decode (%v) or is not detected", err)
		}
		if err := vectortest.SameValue(back, v); err != nil {
			t.Fatalf("round trip changed the value: %v", err)
		}
		checkTensors(t, back)
	}, frame.ErrCorrupt)
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
