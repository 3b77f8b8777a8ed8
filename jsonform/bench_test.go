package jsonform

import (
	"encoding/json"
	"testing"

	"omnishm/tensor"
)

// benchPayload is a typical stage payload: a 64 KiB tensor, a few scalars.
func benchPayload() (map[string]any, map[string]any) {
	z, _ := tensor.Zeros(tensor.Float32, 128, 128)
	ours := map[string]any{"codes": z, "meta": map[string]any{"finished": true, "step": int64(3), "score": 0.25}}
	// The same shape of data for encoding/json, which also base64s []byte.
	baseline := map[string]any{"codes": map[string]any{"$tensor": map[string]any{"data": z.Data, "dtype": "float32", "shape": z.Shape}},
		"meta": map[string]any{"finished": true, "step": int64(3), "score": 0.25}}
	return ours, baseline
}

// Each benchmark runs encoding/json on the same data beside jsonform: the
// baseline measured in the same run.

func BenchmarkMarshal(b *testing.B) {
	ours, baseline := benchPayload()
	for _, c := range []struct {
		name    string
		v       any
		marshal func(any) ([]byte, error)
	}{{"jsonform", ours, Marshal}, {"encoding-json", baseline, json.Marshal}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.marshal(c.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUnmarshal(b *testing.B) {
	v, _ := benchPayload()
	text, _ := Marshal(v)
	for _, c := range []struct {
		name      string
		unmarshal func([]byte) error
	}{
		{"jsonform", func(t []byte) error { _, err := Unmarshal(t); return err }},
		{"encoding-json", func(t []byte) error { var out any; return json.Unmarshal(t, &out) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.unmarshal(text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
