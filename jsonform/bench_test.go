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

func BenchmarkMarshal(b *testing.B) {
	v, _ := benchPayload()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalEncodingJSON(b *testing.B) {
	_, v := benchPayload()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshal(b *testing.B) {
	v, _ := benchPayload()
	text, _ := Marshal(v)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Unmarshal(text); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalEncodingJSON(b *testing.B) {
	v, _ := benchPayload()
	text, _ := Marshal(v)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		var out any
		if err := json.Unmarshal(text, &out); err != nil {
			b.Fatal(err)
		}
	}
}
