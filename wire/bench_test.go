package wire_test

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"omnishm/wire"
)

// BenchmarkNativeList: the seed's tensor-free token list
// (test_tensor_free_lists_reuse_native_serialization).
func BenchmarkNativeList(b *testing.B) {
	ids := make([]any, 8192)
	for i := range ids {
		ids[i] = i
	}
	payload := map[string]any{"prompt_token_ids": ids}
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
	ids := make([]any, 8192)
	for i := range ids {
		ids[i] = i
	}
	payload := map[string]any{"prompt_token_ids": ids}
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
