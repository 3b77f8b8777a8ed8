//go:build linux

package stream

import (
	"encoding/json"
	"reflect"
	"testing"

	"omnishm/frame"
	"omnishm/internal/vectortest"
	"omnishm/jsonform"
	"omnishm/tensor"
	"omnishm/wire"
)

// TestChunkIsTheTypedPayload: a chunk built by the Sender has the shape of
// vLLM-Omni's OmniPayloadStruct (codes.audio, meta.finished as a 0-d bool
// tensor), checked against the Python reference's typed_payload vector;
// and Finished reads that vector's mark, from both byte forms.
func TestChunkIsTheTypedPayload(t *testing.T) {
	want := vectortest.Read(t, "typed_payload.json")
	codes := make([]int64, 28)
	for i := range codes {
		codes[i] = int64(i)
	}
	audio, _ := tensor.FromSlice(codes, 1, 28)
	chunk, err := newChunk(map[string]any{
		"codes":       map[string]any{"audio": audio},
		"meta":        map[string]any{"left_context_size": 0},
		"kv_metadata": map[string]any{"binary_handle": []byte{0x00, 0xff, 0x10}},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := jsonform.Marshal(chunk)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("chunk\n%s\nwant the reference typed payload\n%s", got, want)
	}

	for _, form := range []struct {
		file   string
		decode func([]byte) (any, error)
	}{{"typed_payload.frame", frame.Decode}, {"typed_payload.msgpack", wire.Unmarshal}} {
		v, err := form.decode(vectortest.Read(t, form.file))
		if err != nil {
			t.Fatalf("%s: %v", form.file, err)
		}
		m, ok := asMap(v)
		if !ok {
			t.Fatalf("%s decodes to %T", form.file, v)
		}
		meta, _ := asMap(m["meta"])
		mark, ok := meta["finished"].(*tensor.Tensor)
		if !ok || mark.DType != tensor.Bool || len(mark.Shape) != 0 || Finished(m) {
			t.Fatalf("%s: meta %v: want a 0-d bool finished mark that reads false", form.file, meta)
		}
		mark.Data[0] = 1 // the decoded payload is ours (SPEC §3: nothing aliases shared memory)
		if !Finished(m) {
			t.Fatalf("%s: a true mark reads false", form.file)
		}
	}
}
