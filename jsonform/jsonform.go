// Package jsonform reads and writes the JSON form of a payload (SPEC §10),
// the text that command-line tools print and tests compare.
//
// Plain values map to JSON directly: objects with string keys (printed
// sorted), arrays, null, booleans, integers (int64, or uint64 above
// MaxInt64, never through float64) and floats (always with a decimal point
// or an exponent, as Python's repr prints them: 1.0, 1e-05, 1e+16). Leaves
// JSON has no form for are one-key objects:
//
//	{"$bytes": base64}
//	{"$tensor": {"dtype": "float32", "shape": [2, 3], "data": base64}}
//	{"$ndarray": {"dtype": "<f4", "shape": [2, 3], "data": base64}}
//	{"$image": {"mode": "RGB", "shape": [h, w, c], "data": base64}}
//	{"$ext": {"code": 42, "data": base64}}
//
// Base64 is standard with padding. Output is ASCII only, escaped the way
// Python's json.dumps does, so a payload printed here matches the text the
// Python reference prints for it.
//
// The form is lossy in three documented ways:
//   - A float NaN or infinity prints as the string "NaN", "Infinity" or
//     "-Infinity"; Unmarshal reads those back as strings, never as floats
//     (a JSON string is always a string). Compare payloads by their printed
//     form (Marshal both sides) when they may hold such floats.
//   - Map keys that are not strings print as strings, the way Python's
//     json.dumps converts them (1 -> "1", true -> "true", nil -> "null").
//   - A one-key object whose key is one of the five markers above is always
//     read as that leaf, so a payload map of exactly that shape cannot be
//     written as JSON and read back as a map.
//
// Ownership: Marshal returns a new slice and keeps no reference to the
// value; Unmarshal returns values that own their memory (leaves included),
// sharing nothing with its input. The leaves are package tensor's, built
// and checked by tensor.NewLeaf, the same as the msgpack decoder's.
//
// The package is for tools and tests, not the data path: payloads travel
// as msgpack (package wire) or tensor frames (package frame).
package jsonform

import "errors"

// ErrInvalid is returned by Unmarshal for text that is not a payload's JSON
// form: bad JSON, an integer out of the 64-bit range, or a malformed marker
// object. Errors about a tensor's dtype or shape also wrap
// tensor.ErrUnknownDType or tensor.ErrShape.
var ErrInvalid = errors.New("jsonform: invalid JSON form")

// ErrUnsupported is returned by Marshal for a Go value that has no JSON form
// (a channel, a func, a map key that is not a scalar, a cycle, ...).
var ErrUnsupported = errors.New("jsonform: unsupported value")

// The marker keys of SPEC §10.
const (
	keyBytes   = "$bytes"
	keyTensor  = "$tensor"
	keyNDArray = "$ndarray"
	keyImage   = "$image"
	keyExt     = "$ext"
)

// maxDepth bounds nesting on both sides: deep enough for any real payload,
// and it turns a cyclic Go value into an error instead of a stack overflow.
const maxDepth = 10000
