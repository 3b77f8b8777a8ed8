// Package tensor holds the payload leaves that travel between stages (SPEC
// §4, §5): dense tensors (PyTorch dtypes, C-contiguous, little-endian),
// numpy arrays and PIL images, with validation of their shapes against
// their bytes. It does no I/O and knows no byte form; the codecs (wire,
// frame, jsonform) build leaves with New or NewLeaf and check them with
// Validate.
//
// Each leaf is a name (a DType, a numpy dtype string or an image mode), a
// shape and raw bytes; a Kind names which of the three a leaf is.
//
// # Ownership
//
// Tensor, Array and Image are plain values whose fields the holder owns:
// nothing in this package keeps a reference to them.
//   - New, NewLeaf and FromSlice alias what they are given (shape, data,
//     the slice's memory) instead of copying it; the caller must not change
//     it while the leaf is in use.
//   - Values aliases the tensor's data when it is aligned, and copies it
//     otherwise; Scalar, Zeros and Clone return memory of their own.
//   - A leaf a decoder returns owns its data: nothing aliases the decoder's
//     input or shared memory (SPEC §3).
//
// Validation errors wrap ErrUnknownDType or ErrShape, for errors.Is.
package tensor

import (
	"errors"
	"fmt"
)

// DType is a tensor element type, named as PyTorch names it without "torch.".
type DType uint8

// The dtypes of SPEC §4.
const (
	Bool DType = iota + 1
	Uint8
	Int8
	Int16
	Int32
	Int64
	Uint16
	Uint32
	Uint64
	Float16
	BFloat16
	Float32
	Float64
	Complex64
	Complex128
)

// ErrUnknownDType is returned for a dtype name outside SPEC §4.
var ErrUnknownDType = errors.New("tensor: unknown dtype")

// ErrShape is returned when a shape does not describe the data it comes with.
var ErrShape = errors.New("tensor: shape does not match data")

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Bool: {"bool", 1}, Uint8: {"uint8", 1}, Int8: {"int8", 1},
	Int16: {"int16", 2}, Int32: {"int32", 4}, Int64: {"int64", 8},
	Uint16: {"uint16", 2}, Uint32: {"uint32", 4}, Uint64: {"uint64", 8},
	Float16: {"float16", 2}, BFloat16: {"bfloat16", 2}, Float32: {"float32", 4},
	Float64: {"float64", 8}, Complex64: {"complex64", 8}, Complex128: {"complex128", 16},
}

// ParseDType maps a PyTorch dtype name ("float32", "bfloat16", ...) to a DType.
func ParseDType(name string) (DType, error) {
	if d, ok := LookupDType(name); ok {
		return d, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownDType, name)
}

// LookupDType is ParseDType without an error value: ok is false for a name
// outside SPEC §4. name does not escape, so a decoder can look up
// LookupDType(string(b)) straight from its input without allocating.
func LookupDType(name string) (d DType, ok bool) {
	// A switch compiles to a search by length, then a comparison or two:
	// cheaper than hashing the name for a map lookup.
	switch name {
	case "bool":
		d = Bool
	case "uint8":
		d = Uint8
	case "int8":
		d = Int8
	case "int16":
		d = Int16
	case "int32":
		d = Int32
	case "int64":
		d = Int64
	case "uint16":
		d = Uint16
	case "uint32":
		d = Uint32
	case "uint64":
		d = Uint64
	case "float16":
		d = Float16
	case "bfloat16":
		d = BFloat16
	case "float32":
		d = Float32
	case "float64":
		d = Float64
	case "complex64":
		d = Complex64
	case "complex128":
		d = Complex128
	default:
		return 0, false
	}
	return d, true
}

// Valid reports whether d is one of the dtypes of SPEC §4.
func (d DType) Valid() bool { return d >= Bool && d <= Complex128 }

// String returns the PyTorch name, or "invalid(N)".
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("invalid(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// ItemSize is the size of one element in bytes (0 for an invalid dtype).
func (d DType) ItemSize() int {
	if !d.Valid() {
		return 0
	}
	return dtypeInfo[d].size
}
