package tensor

import (
	"fmt"
	"slices"
	"strconv"
)

// Array is a numpy array as the Python side sends it: a numpy dtype string
// such as "<f4", "|b1" or "<c8", a shape, and C-contiguous bytes.
type Array struct {
	DType string
	Shape []int
	Data  []byte
}

// Validate checks that DType is a fixed-size numpy dtype string and that
// Shape describes Data exactly.
func (a *Array) Validate() error {
	size, err := NumpyItemSize(a.DType)
	if err != nil {
		return err
	}
	return checkData(a.Shape, size, len(a.Data))
}

// Equal reports whether two arrays have the same dtype, shape and bytes.
func (a *Array) Equal(o *Array) bool {
	return a.DType == o.DType && slices.Equal(a.Shape, o.Shape) && string(a.Data) == string(o.Data)
}

// NumpyItemSize parses a numpy dtype string ("<f4", "|u1", ">i8", "<c16")
// and returns its item size. Numeric kinds accept only the sizes numpy has
// (b1; i and u 1, 2, 4, 8; f 2, 4, 8, 16; c 8, 16, 32); S, U and V any.
func NumpyItemSize(s string) (int, error) {
	bad := fmt.Errorf("%w: numpy dtype %q", ErrUnknownDType, s)
	if len(s) < 3 {
		return 0, bad
	}
	switch s[0] {
	case '<', '>', '|', '=':
	default:
		return 0, bad
	}
	for _, c := range []byte(s[2:]) {
		if c < '0' || c > '9' { // strconv.Atoi alone would take "+4"
			return 0, bad
		}
	}
	n, err := strconv.Atoi(s[2:])
	if err != nil || n <= 0 || n > 1<<20 {
		return 0, bad
	}
	var sizes []int
	switch s[1] {
	case 'b':
		sizes = []int{1}
	case 'i', 'u':
		sizes = []int{1, 2, 4, 8}
	case 'f':
		sizes = []int{2, 4, 8, 16}
	case 'c':
		sizes = []int{8, 16, 32}
	case 'V', 'S':
	case 'U':
		n *= 4 // numpy's unicode items are UCS-4
	default:
		return 0, bad
	}
	if sizes != nil && !slices.Contains(sizes, n) {
		return 0, bad
	}
	return n, nil
}

// Image is a PIL image as the Python side sends it: a mode ("RGB", "L",
// ...), a shape ([h, w] or [h, w, c]) and uint8 pixel bytes.
type Image struct {
	Mode  string
	Shape []int
	Data  []byte
}

// Validate checks that Shape describes Data exactly.
func (m *Image) Validate() error {
	if m.Mode == "" {
		return fmt.Errorf("%w: image without a mode", ErrShape)
	}
	return checkData(m.Shape, 1, len(m.Data))
}

// Equal reports whether two images have the same mode, shape and bytes.
func (m *Image) Equal(o *Image) bool {
	return m.Mode == o.Mode && slices.Equal(m.Shape, o.Shape) && string(m.Data) == string(o.Data)
}

// Kind is one of the three leaf types a payload carries (SPEC §5). Each
// travels as the same three fields: a name (NameField: a dtype or a mode),
// a shape and the raw bytes, which is what NewLeaf builds a leaf from.
type Kind uint8

// The leaf kinds.
const (
	KindTensor Kind = iota + 1 // *Tensor; its name is a PyTorch dtype name
	KindArray                  // *Array; its name is a numpy dtype string
	KindImage                  // *Image; its name is a PIL mode
)

var kindNames = [...]string{KindTensor: "tensor", KindArray: "ndarray", KindImage: "image"}

// String names the kind as errors print it: "tensor", "ndarray", "image".
func (k Kind) String() string {
	if k < KindTensor || k > KindImage {
		return fmt.Sprintf("invalid(%d)", uint8(k))
	}
	return kindNames[k]
}

// NameField is the key of the kind's name field in both the msgpack and
// the JSON form: "mode" for images, "dtype" for the others.
func (k Kind) NameField() string {
	if k == KindImage {
		return "mode"
	}
	return "dtype"
}

// NewLeaf validates name, shape and data as a leaf of kind k and returns
// it: a *Tensor, *Array or *Image that uses shape and data without copying
// them (the caller hands them over). Errors wrap ErrUnknownDType or
// ErrShape.
func NewLeaf(k Kind, name string, shape []int, data []byte) (any, error) {
	switch k {
	case KindTensor:
		dt, err := ParseDType(name)
		if err != nil {
			return nil, err
		}
		t, err := New(dt, shape, data)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return t, nil
	case KindArray:
		a := &Array{DType: name, Shape: shape, Data: data}
		if err := a.Validate(); err != nil {
			return nil, err
		}
		return a, nil
	case KindImage:
		m := &Image{Mode: name, Shape: shape, Data: data}
		if err := m.Validate(); err != nil {
			return nil, err
		}
		return m, nil
	}
	return nil, fmt.Errorf("tensor: leaf kind %v", k)
}
