// Package wire is the msgpack form of a payload (SPEC §5): byte for byte what
// vLLM-Omni's OmniSerializer (msgspec) writes, and its inverse. It is the
// module's one msgpack codec: the tensor frame (package frame) writes its
// header with the Append functions and reads it with Reader.
//
// Tensors, numpy arrays and images travel as maps whose first key is a marker
// ("__tensor__", "__ndarray__", "__pil_image__") with the value true; decoding
// restores them as *tensor.Tensor, *tensor.Array and *tensor.Image.
//
// A typed numeric slice ([]float32, []int64, []bool, []tensor.Half, ...)
// travels as the 1-D tensor it is, so a Python peer gets a torch.Tensor of
// its dtype and nothing changes type on the way; []any, []int and []string
// travel as lists (see Encoder). Decode turns a received tree back into Go
// values: structs with msgpack tags, typed slices and maps, leaves.
//
// The API comes in three layers: Marshal and Unmarshal for whole values;
// Encoder and Decoder, whose hooks let the frame codec replace tensors by
// references; and the streaming pieces, Reader and the Append functions,
// for fixed layouts.
//
// # Ownership
//
//   - Marshal and Append copy what they encode into the bytes they return
//     and keep no reference to the value.
//   - Unmarshal returns a value that shares nothing with its input: the
//     input (ring memory, say) may be reused at once (SPEC §3).
//   - UnmarshalOwned, and Decoder with Owned set, let bins of at least
//     OwnedAliasMin bytes alias the input, which the caller hands over.
//   - Decoder's Ext hook and Reader see bytes that alias the input: valid
//     during the hook's call, or as long as the input is.
//   - Decode stores into v the tree's leaves, bins and containers it takes
//     as they are (a *tensor.Tensor field is the tree's tensor); numeric
//     slices it fills from tensors are copies.
//
// Bad input never panics or reads out of bounds: decoding errors wrap
// ErrCorrupt, encoding errors ErrUnsupported, and Decode's mismatches
// ErrMismatch.
package wire

import "errors"

// ErrUnsupported is returned (wrapped) by Marshal for a value that has no
// msgpack form: channels, functions, complex scalars, cycles deeper than the
// nesting limit, tensors whose data does not match their shape; and by
// Decode for a target that is not a non-nil pointer or has no payload form.
var ErrUnsupported = errors.New("wire: unsupported value")

// ErrCorrupt is returned (wrapped) by Unmarshal for bytes that are not one
// well-formed msgpack value, or whose marker maps are not valid leaves.
var ErrCorrupt = errors.New("wire: corrupt msgpack")

// maxDepth bounds the nesting of arrays and maps, so a hostile input made of
// nested one-byte arrays cannot exhaust the stack.
const maxDepth = 512

// Ext is a literal msgpack extension value (msgspec.msgpack.Ext).
type Ext struct {
	Code int8
	Data []byte
}

// KV is one entry of a Map.
type KV struct {
	Key   any
	Value any
}

// Map is a msgpack map kept in order, for callers that need Python's dict
// insertion order (Marshal encodes a map[string]any with sorted keys).
type Map []KV

// Get returns the value of the last entry whose key is the string key (a
// later duplicate wins, as in a Python dict).
func (m Map) Get(key string) (any, bool) {
	for i := len(m) - 1; i >= 0; i-- {
		if s, ok := m[i].Key.(string); ok && s == key {
			return m[i].Value, true
		}
	}
	return nil, false
}

// Marshal returns the msgpack form of v (SPEC §5). See Encoder for the
// accepted Go values.
func Marshal(v any) ([]byte, error) {
	return Append(nil, v)
}

// Append appends the msgpack form of v to dst.
func Append(dst []byte, v any) ([]byte, error) {
	var e Encoder
	return e.Append(dst, v)
}

// Unmarshal decodes one msgpack value filling all of b. Maps become
// map[string]any (map[any]any if a key is not a string), arrays []any,
// integers int64 (uint64 above math.MaxInt64), floats float64, bin []byte,
// extensions Ext, and marker maps their leaves. The result never aliases b.
func Unmarshal(b []byte) (any, error) {
	var d Decoder
	return d.Decode(b)
}

// UnmarshalOwned is Unmarshal for a buffer the caller hands over (a segment
// it just read into memory of its own): large bins alias b rather than
// being copied again. b must not be changed or reused afterwards.
func UnmarshalOwned(b []byte) (any, error) {
	d := Decoder{Owned: true}
	return d.Decode(b)
}

// markers of the leaf maps, SPEC §5.
const (
	tensorMarker = "__tensor__"
	arrayMarker  = "__ndarray__"
	imageMarker  = "__pil_image__"
)
