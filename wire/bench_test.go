package wire_test

import (
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"omnishm/tensor"
	"omnishm/wire"
)

// BenchmarkNativeList: the seed's tensor-free token list
// (test_tensor_free_lists_reuse_native_serialization).
func BenchmarkNativeList(b *testing.B) {
	payload := nativeList()
	buf, _ := wire.Marshal(payload)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := wire.Append(buf[:0], payload)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := wire.Unmarshal(out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNativeListBaseline: the same round trip through
// github.com/vmihailenco/msgpack/v5's reflection codec, for the ratio.
func BenchmarkNativeListBaseline(b *testing.B) {
	payload := nativeList()
	b.ReportAllocs()
	for b.Loop() {
		out, err := msgpack.Marshal(payload)
		if err != nil {
			b.Fatal(err)
		}
		var v any
		if err := msgpack.Unmarshal(out, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// nativeList is the seed's tensor-free payload: 8192 token ids.
func nativeList() map[string]any {
	ids := make([]any, 8192)
	for i := range ids {
		ids[i] = i
	}
	return map[string]any{"prompt_token_ids": ids}
}

// chunkTree is a decoded codec step: int64 codes, float32 hidden states,
// a 0-d finish mark and metadata, as Recv returns it.
func chunkTree(b *testing.B) any {
	codes, _ := tensor.FromSlice(make([]int64, 28), 1, 28)
	hidden, _ := tensor.FromSlice(make([]float32, 1024), 1, 1024)
	buf, err := wire.Marshal(map[string]any{
		"codes": map[string]any{"audio": codes}, "hidden": hidden,
		"finished": tensor.Scalar(false), "meta": map[string]any{"left_context_size": 0},
	})
	if err != nil {
		b.Fatal(err)
	}
	v, err := wire.Unmarshal(buf)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

type benchChunk struct {
	Codes struct {
		Audio []int64 `msgpack:"audio"`
	} `msgpack:"codes"`
	Hidden   []float32 `msgpack:"hidden"`
	Finished bool      `msgpack:"finished"`
	Meta     struct {
		LeftContextSize int `msgpack:"left_context_size"`
	} `msgpack:"meta"`
}

// BenchmarkDecodeChunk: wire.Decode of chunkTree into a struct.
func BenchmarkDecodeChunk(b *testing.B) {
	tree := chunkTree(b)
	b.ReportAllocs()
	for b.Loop() {
		var c benchChunk
		if err := wire.Decode(tree, &c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeChunkByHand: the same by type assertions and
// tensor.Values, copying the slices as Decode does, for the ratio.
func BenchmarkDecodeChunkByHand(b *testing.B) {
	tree := chunkTree(b)
	b.ReportAllocs()
	for b.Loop() {
		var c benchChunk
		m := tree.(map[string]any)
		audio, err := tensor.Values[int64](m["codes"].(map[string]any)["audio"].(*tensor.Tensor))
		if err != nil {
			b.Fatal(err)
		}
		hidden, err := tensor.Values[float32](m["hidden"].(*tensor.Tensor))
		if err != nil {
			b.Fatal(err)
		}
		c.Codes.Audio, c.Hidden = slices.Clone(audio), slices.Clone(hidden)
		c.Finished = m["finished"].(*tensor.Tensor).Data[0] == 1
		c.Meta.LeftContextSize = int(m["meta"].(map[string]any)["left_context_size"].(int64))
	}
}

// BenchmarkMarshalFloat32s: 1024 float32 values as the tensor a []float32
// travels as; BenchmarkMarshalFloat32sAsList is the list of float64 it
// used to be, for the ratio.
func BenchmarkMarshalFloat32s(b *testing.B) {
	v := make([]float32, 1024)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := wire.Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalFloat32sAsList(b *testing.B) {
	v := make([]any, 1024)
	for i := range v {
		v[i] = float64(0)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := wire.Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}
