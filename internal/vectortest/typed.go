package vectortest

import (
	"testing"

	"omnishm/tensor"
)

// OmniPayload mirrors the seed's OmniPayloadStruct (vllm_omni.data_entry_keys)
// as a Go struct: omitted defaults are absent from the map it travels as, and
// neither Skipped (tag "-") nor the unexported field travels at all.
type OmniPayload struct {
	Codes      *Codes         `msgpack:"codes,omitempty"`
	Hidden     *tensor.Tensor `msgpack:"hidden,omitempty"`
	Meta       *Meta          `msgpack:"meta,omitempty"`
	KVMetadata map[string]any `msgpack:"kv_metadata,omitempty"`
	Skipped    string         `msgpack:"-"`
	internal   int
}

// Codes mirrors the seed's CodesStruct.
type Codes struct {
	Audio *tensor.Tensor `msgpack:"audio,omitempty"`
	Video *tensor.Tensor `msgpack:"video,omitempty"`
}

// Meta mirrors the seed's MetaStruct.
type Meta struct {
	Finished        *tensor.Tensor `msgpack:"finished,omitempty"`
	LeftContextSize *int           `msgpack:"left_context_size,omitempty"`
	Extra           string         `msgpack:"extra,omitempty"`
}

// TypedPayload returns the seed's typed payload, the value behind
// typed_payload.msgpack and typed_payload.frame: codes.audio (int64, 1×28,
// 0 to 27), meta.finished false, meta.left_context_size 0 and
// kv_metadata.binary_handle 00 ff 10; a skipped and an unexported field are
// set and must not travel. Each call builds a new value the caller owns.
func TypedPayload(t testing.TB) *OmniPayload {
	t.Helper()
	ids := make([]int64, 28)
	for i := range ids {
		ids[i] = int64(i)
	}
	audio, err := tensor.FromSlice(ids, 1, 28)
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	return &OmniPayload{
		Codes:      &Codes{Audio: audio},
		Meta:       &Meta{Finished: tensor.Scalar(false), LeftContextSize: &zero},
		KVMetadata: map[string]any{"binary_handle": []byte{0x00, 0xff, 0x10}},
		Skipped:    "never sent",
		internal:   1,
	}
}
