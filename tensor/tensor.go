package tensor

import (
	"fmt"
	"reflect"
	"slices"
	"unsafe"
)

// Tensor is a dense, C-contiguous, little-endian tensor. Data holds exactly
// product(Shape) * DType.ItemSize() bytes. A 0-d tensor has an empty Shape
// and one element.
//
// Ownership: a Tensor returned by a decoder owns its Data; nothing it holds
// aliases shared memory.
type Tensor struct {
	DType DType
	Shape []int
	Data  []byte
}

// New validates dtype, shape and data and returns a Tensor that uses data
// without copying it.
func New(dtype DType, shape []int, data []byte) (*Tensor, error) {
	t := &Tensor{DType: dtype, Shape: shape, Data: data}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// Zeros returns a zero-filled tensor of the given dtype and shape.
func Zeros(dtype DType, shape ...int) (*Tensor, error) {
	if !dtype.Valid() {
		return nil, fmt.Errorf("%w: %v", ErrUnknownDType, dtype)
	}
	n, err := ByteSize(shape, dtype.ItemSize())
	if err != nil {
		return nil, err
	}
	return &Tensor{DType: dtype, Shape: shape, Data: make([]byte, n)}, nil
}

// Validate checks the dtype and that the shape describes Data exactly.
func (t *Tensor) Validate() error {
	if !t.DType.Valid() {
		return fmt.Errorf("%w: %v", ErrUnknownDType, t.DType)
	}
	return checkData(t.Shape, t.DType.ItemSize(), len(t.Data))
}

// Len is the number of elements: the product of Shape (1 for a 0-d tensor).
func (t *Tensor) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Clone returns a deep copy that shares nothing with t.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{
		DType: t.DType,
		Shape: append([]int(nil), t.Shape...),
		Data:  append([]byte(nil), t.Data...),
	}
}

// Equal reports whether two tensors have the same dtype, shape and bytes.
func (t *Tensor) Equal(o *Tensor) bool {
	if t == nil || o == nil {
		return t == o
	}
	return t.DType == o.DType && slices.Equal(t.Shape, o.Shape) && string(t.Data) == string(o.Data)
}

func (t *Tensor) String() string {
	return fmt.Sprintf("tensor(%s, shape=%v, %d bytes)", t.DType, t.Shape, len(t.Data))
}

// Element is a Go type with the in-memory layout of one tensor dtype.
type Element interface {
	bool | uint8 | int8 | int16 | int32 | int64 | uint16 | uint32 | uint64 |
		float32 | float64 | complex64 | complex128 | Half | BHalf
}

// DTypeOf returns the dtype whose elements have T's layout.
func DTypeOf[T Element]() DType {
	d, _ := DTypeOfType(reflect.TypeFor[T]())
	return d
}

// DTypeOfType returns the dtype whose elements have the layout of t: Half
// and BHalf are float16 and bfloat16, other types go by their kind, so a
// named type such as `type Code int32` is int32. ok is false for a type
// with no dtype, among them int, uint and uintptr, whose size is the
// host's.
func DTypeOfType(t reflect.Type) (d DType, ok bool) {
	switch t {
	case reflect.TypeFor[Half]():
		return Float16, true
	case reflect.TypeFor[BHalf]():
		return BFloat16, true
	}
	switch t.Kind() {
	case reflect.Bool:
		d = Bool
	case reflect.Uint8:
		d = Uint8
	case reflect.Int8:
		d = Int8
	case reflect.Int16:
		d = Int16
	case reflect.Int32:
		d = Int32
	case reflect.Int64:
		d = Int64
	case reflect.Uint16:
		d = Uint16
	case reflect.Uint32:
		d = Uint32
	case reflect.Uint64:
		d = Uint64
	case reflect.Float32:
		d = Float32
	case reflect.Float64:
		d = Float64
	case reflect.Complex64:
		d = Complex64
	case reflect.Complex128:
		d = Complex128
	default:
		return 0, false
	}
	return d, true
}

// FromSlice returns a tensor over values with the given shape (a 1-d shape
// of len(values) when none is given). The tensor shares values' memory: no
// copy is made, so the caller must not change values while the tensor is in
// use. Hosts are little-endian (amd64, arm64), which is the wire order.
func FromSlice[T Element](values []T, shape ...int) (*Tensor, error) {
	if shape == nil {
		shape = []int{len(values)}
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	var data []byte
	if len(values) > 0 {
		data = unsafe.Slice((*byte)(unsafe.Pointer(&values[0])), len(values)*size)
	} else {
		data = []byte{}
	}
	return New(DTypeOf[T](), shape, data)
}

// Scalar returns a 0-d tensor holding v (a copy).
func Scalar[T Element](v T) *Tensor {
	t, _ := FromSlice([]T{v}, []int{}...)
	t.Shape = []int{}
	return t
}

// Values returns the tensor's elements as a []T. It aliases t.Data when the
// data is suitably aligned, and copies otherwise. T must match the dtype,
// and a bool tensor whose bytes are not all 0 or 1 gives an error.
func Values[T Element](t *Tensor) ([]T, error) {
	if want := DTypeOf[T](); t.DType != want {
		return nil, fmt.Errorf("tensor: dtype %v read as %v", t.DType, want)
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	n := len(t.Data) / size
	if n == 0 {
		return []T{}, nil
	}
	if t.DType == Bool {
		// A Go bool must hold 0 or 1; any other byte, which bytes from
		// another process may carry, would make comparisons misbehave.
		for i, b := range t.Data {
			if b > 1 {
				return nil, fmt.Errorf("tensor: bool element %d is %#x, not 0 or 1", i, b)
			}
		}
	}
	if uintptr(unsafe.Pointer(&t.Data[0]))%unsafe.Alignof(zero) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(&t.Data[0])), n), nil
	}
	out := make([]T, n)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), n*size), t.Data)
	return out, nil
}
