package tensor

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"unsafe"
)

// roundTrip checks FromSlice and Values over values of one element type:
// the dtype, the shape, no copy either way, and the elements read back.
func roundTrip[T Element](t *testing.T, want DType, values []T) {
	t.Helper()
	tt, err := FromSlice(values)
	if err != nil {
		t.Fatal(err)
	}
	if tt.DType != want {
		t.Errorf("FromSlice dtype = %v, want %v", tt.DType, want)
	}
	if !slices.Equal(tt.Shape, []int{len(values)}) {
		t.Errorf("FromSlice shape = %v, want [%d]", tt.Shape, len(values))
	}
	if len(tt.Data) != len(values)*want.ItemSize() {
		t.Fatalf("FromSlice data is %d bytes, want %d", len(tt.Data), len(values)*want.ItemSize())
	}
	if unsafe.Pointer(&tt.Data[0]) != unsafe.Pointer(&values[0]) {
		t.Error("FromSlice copied the values")
	}
	got, err := Values[T](tt)
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.Pointer(&got[0]) != unsafe.Pointer(&values[0]) {
		t.Error("Values copied aligned data")
	}
	if !slices.Equal(got, values) {
		t.Errorf("Values = %v, want %v", got, values)
	}

	// A 2-d shape over the same values, and a mismatched one.
	if len(values)%2 == 0 {
		t2, err := FromSlice(values, 2, len(values)/2)
		if err != nil || t2.Len() != len(values) {
			t.Errorf("FromSlice 2x%d: %v, Len %d", len(values)/2, err, t2.Len())
		}
	}
	if _, err := FromSlice(values, len(values)+1); !errors.Is(err, ErrShape) {
		t.Errorf("FromSlice with a shape too large: %v, want ErrShape", err)
	}

	// Unaligned data is copied, with the same elements.
	if size := want.ItemSize(); size > 1 {
		// An odd address, whatever alignment the allocator gave buf (the
		// tiny allocator places odd-sized blocks at odd addresses).
		buf := make([]byte, len(tt.Data)+1)
		odd := buf[1:]
		if uintptr(unsafe.Pointer(&buf[0]))%2 == 1 {
			odd = buf[:len(tt.Data)]
		}
		copy(odd, tt.Data)
		u := &Tensor{DType: want, Shape: tt.Shape, Data: odd}
		got, err := Values[T](u)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, values) {
			t.Errorf("Values of unaligned data = %v, want %v", got, values)
		}
		if unsafe.Pointer(&got[0]) == unsafe.Pointer(&odd[0]) {
			t.Error("Values aliased unaligned data")
		}
	}

	// Scalar: a 0-d tensor of one element, its own copy.
	s := Scalar(values[0])
	if s.DType != want || len(s.Shape) != 0 || s.Len() != 1 || len(s.Data) != want.ItemSize() {
		t.Errorf("Scalar = %v, len %d", s, s.Len())
	}
	if err := s.Validate(); err != nil {
		t.Errorf("Scalar does not validate: %v", err)
	}
	if sv, _ := Values[T](s); len(sv) != 1 || sv[0] != values[0] {
		t.Errorf("Scalar holds %v, want %v", sv, values[0])
	}
	if unsafe.Pointer(&s.Data[0]) == unsafe.Pointer(&values[0]) {
		t.Error("Scalar aliases its argument")
	}

	// Empty: shape [0], no bytes, no elements.
	e, err := FromSlice([]T{})
	if err != nil || !slices.Equal(e.Shape, []int{0}) || len(e.Data) != 0 || e.Len() != 0 {
		t.Errorf("FromSlice(empty) = %v, %v", e, err)
	}
	if ev, err := Values[T](e); err != nil || len(ev) != 0 {
		t.Errorf("Values(empty) = %v, %v", ev, err)
	}
	if _, err := FromSlice([]T(nil)); err != nil {
		t.Errorf("FromSlice(nil): %v", err)
	}
}

func TestFromSliceValues(t *testing.T) {
	t.Run("bool", func(t *testing.T) { roundTrip(t, Bool, []bool{true, false, true, true}) })
	t.Run("uint8", func(t *testing.T) { roundTrip(t, Uint8, []uint8{0, 1, 255, 7}) })
	t.Run("int8", func(t *testing.T) { roundTrip(t, Int8, []int8{-128, 0, 127, -1}) })
	t.Run("int16", func(t *testing.T) { roundTrip(t, Int16, []int16{-32768, 0, 32767, 1}) })
	t.Run("int32", func(t *testing.T) { roundTrip(t, Int32, []int32{math.MinInt32, 0, math.MaxInt32, 5}) })
	t.Run("int64", func(t *testing.T) { roundTrip(t, Int64, []int64{math.MinInt64, 0, math.MaxInt64, 5}) })
	t.Run("uint16", func(t *testing.T) { roundTrip(t, Uint16, []uint16{0, 65535, 3, 4}) })
	t.Run("uint32", func(t *testing.T) { roundTrip(t, Uint32, []uint32{0, math.MaxUint32, 3, 4}) })
	t.Run("uint64", func(t *testing.T) { roundTrip(t, Uint64, []uint64{0, math.MaxUint64, 3, 4}) })
	t.Run("float16", func(t *testing.T) { roundTrip(t, Float16, []Half{0x3c00, 0x7bff, 0x8000, 0x0001}) })
	t.Run("bfloat16", func(t *testing.T) { roundTrip(t, BFloat16, []BHalf{0x3f80, 0x7f7f, 0x8000, 0x0001}) })
	t.Run("float32", func(t *testing.T) { roundTrip(t, Float32, []float32{1.5, -0, math.MaxFloat32, 1e-45}) })
	t.Run("float64", func(t *testing.T) { roundTrip(t, Float64, []float64{1.5, -2, math.MaxFloat64, 5e-324}) })
	t.Run("complex64", func(t *testing.T) { roundTrip(t, Complex64, []complex64{1 + 2i, -3i, 0, 4}) })
	t.Run("complex128", func(t *testing.T) { roundTrip(t, Complex128, []complex128{1 + 2i, -3i, 0, 4}) })
}

func TestLittleEndianLayout(t *testing.T) {
	tt, err := FromSlice([]int32{0x01020304, -2})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{4, 3, 2, 1, 0xfe, 0xff, 0xff, 0xff}
	if string(tt.Data) != string(want) {
		t.Errorf("int32 data = % x, want % x", tt.Data, want)
	}
	c := Scalar(complex64(complex(1, -2)))
	want = []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0} // real then imaginary float32
	if string(c.Data) != string(want) {
		t.Errorf("complex64 data = % x, want % x", c.Data, want)
	}
}

func TestValuesWrongType(t *testing.T) {
	tt := Scalar(float32(1))
	if _, err := Values[int32](tt); err == nil {
		t.Error("Values[int32] of a float32 tensor succeeded")
	}
	if _, err := Values[Half](Scalar(BHalf(0x3f80))); err == nil {
		t.Error("Values[Half] of a bfloat16 tensor succeeded")
	}
}

func TestZeros(t *testing.T) {
	for d := Bool; d <= Complex128; d++ {
		z, err := Zeros(d, 2, 3)
		if err != nil {
			t.Fatalf("Zeros(%v): %v", d, err)
		}
		if z.DType != d || !slices.Equal(z.Shape, []int{2, 3}) || len(z.Data) != 6*d.ItemSize() {
			t.Errorf("Zeros(%v, 2, 3) = %v", d, z)
		}
		for _, b := range z.Data {
			if b != 0 {
				t.Fatalf("Zeros(%v) is not zero", d)
			}
		}
		s, err := Zeros(d)
		if err != nil || len(s.Shape) != 0 || len(s.Data) != d.ItemSize() || s.Len() != 1 {
			t.Errorf("Zeros(%v) 0-d = %v, %v", d, s, err)
		}
		e, err := Zeros(d, 4, 0)
		if err != nil || len(e.Data) != 0 || e.Len() != 0 {
			t.Errorf("Zeros(%v, 4, 0) = %v, %v", d, e, err)
		}
	}
	if _, err := Zeros(0, 1); !errors.Is(err, ErrUnknownDType) {
		t.Errorf("Zeros(invalid dtype): %v", err)
	}
	if _, err := Zeros(Float32, 2, -1); !errors.Is(err, ErrShape) {
		t.Errorf("Zeros(negative dim): %v", err)
	}
	if _, err := Zeros(Float64, 1<<40, 1<<40); !errors.Is(err, ErrShape) {
		t.Errorf("Zeros(overflowing shape): %v", err)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		t    Tensor
		want error
	}{
		{"ok", Tensor{Float32, []int{2, 2}, make([]byte, 16)}, nil},
		{"ok 0-d", Tensor{Int64, []int{}, make([]byte, 8)}, nil},
		{"ok nil shape is 0-d", Tensor{Int64, nil, make([]byte, 8)}, nil},
		{"ok empty", Tensor{Int64, []int{3, 0}, nil}, nil},
		{"invalid dtype 0", Tensor{0, []int{1}, make([]byte, 1)}, ErrUnknownDType},
		{"invalid dtype 16", Tensor{Complex128 + 1, []int{1}, make([]byte, 1)}, ErrUnknownDType},
		{"negative dim", Tensor{Uint8, []int{-1}, nil}, ErrShape},
		{"negative dim beside zero", Tensor{Uint8, []int{0, -1}, nil}, ErrShape},
		{"overflow", Tensor{Int64, []int{1 << 62, 4}, nil}, ErrShape},
		{"overflow max int", Tensor{Uint8, []int{math.MaxInt, math.MaxInt}, nil}, ErrShape},
		{"short data", Tensor{Int16, []int{3}, make([]byte, 5)}, ErrShape},
		{"long data", Tensor{Int16, []int{3}, make([]byte, 7)}, ErrShape},
		{"0-d without data", Tensor{Float32, []int{}, nil}, ErrShape},
		{"empty with data", Tensor{Float32, []int{0}, make([]byte, 4)}, ErrShape},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.t.Validate()
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("Validate = %v, want %v", err, c.want)
			}
			nt, err := New(c.t.DType, c.t.Shape, c.t.Data)
			if (err == nil) != (c.want == nil) || (err == nil && nt == nil) {
				t.Errorf("New = %v, %v", nt, err)
			}
		})
	}
}

func TestByteSize(t *testing.T) {
	cases := []struct {
		shape []int
		item  int
		want  int
		ok    bool
	}{
		{nil, 4, 4, true},
		{[]int{}, 2, 2, true},
		{[]int{3, 5}, 8, 120, true},
		{[]int{0}, 8, 0, true},
		{[]int{1 << 40, 0}, 8, 0, true},
		{[]int{0, 1 << 40, 1 << 40}, 8, 0, true},
		{[]int{1 << 40, 1 << 40, 0}, 8, 0, true}, // a zero anywhere means no bytes
		{[]int{1 << 30, 1 << 30}, 4, 1 << 62, false},
		{[]int{1 << 31, 1 << 30}, 1, 1 << 61, true},
		{[]int{math.MaxInt}, 2, 0, false},
		{[]int{1 << 32, 1 << 32}, 1, 0, false},     // a product that wraps to 0
		{[]int{1 << 40, 1 << 40, -1}, 1, 0, false}, // negative after an overflow
		{[]int{-1}, 1, 0, false},
		{[]int{2, -3, 0}, 1, 0, false},
		{[]int{2}, 0, 0, false},
		{[]int{2}, -4, 0, false},
	}
	for _, c := range cases {
		got, err := ByteSize(c.shape, c.item)
		if c.ok && (err != nil || got != c.want) {
			t.Errorf("ByteSize(%v, %d) = %d, %v; want %d", c.shape, c.item, got, err, c.want)
		}
		if !c.ok && !errors.Is(err, ErrShape) {
			t.Errorf("ByteSize(%v, %d) = %d, %v; want ErrShape", c.shape, c.item, got, err)
		}
	}
}

func TestParseDType(t *testing.T) {
	names := map[string]struct {
		d    DType
		size int
	}{
		"bool": {Bool, 1}, "uint8": {Uint8, 1}, "int8": {Int8, 1}, "int16": {Int16, 2},
		"int32": {Int32, 4}, "int64": {Int64, 8}, "uint16": {Uint16, 2}, "uint32": {Uint32, 4},
		"uint64": {Uint64, 8}, "float16": {Float16, 2}, "bfloat16": {BFloat16, 2},
		"float32": {Float32, 4}, "float64": {Float64, 8}, "complex64": {Complex64, 8},
		"complex128": {Complex128, 16},
	}
	for name, w := range names {
		d, err := ParseDType(name)
		if err != nil || d != w.d {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", name, d, err, w.d)
		}
		if l, ok := LookupDType(name); !ok || l != w.d {
			t.Errorf("LookupDType(%q) = %v, %v; want %v", name, l, ok, w.d)
		}
		if d.String() != name || d.ItemSize() != w.size || !d.Valid() {
			t.Errorf("%v: String %q, ItemSize %d, Valid %v", d, d.String(), d.ItemSize(), d.Valid())
		}
	}
	n := 0
	for d := DType(0); d < 255; d++ {
		if d.Valid() {
			n++
		}
	}
	if n != len(names) {
		t.Errorf("%d valid dtypes, %d names", n, len(names))
	}
	for _, bad := range []string{"", "float", "torch.float32", "Float32", "float32 ", "half", "int", "complex32", "invalid(0)"} {
		if d, err := ParseDType(bad); !errors.Is(err, ErrUnknownDType) {
			t.Errorf("ParseDType(%q) = %v, %v; want ErrUnknownDType", bad, d, err)
		}
		if d, ok := LookupDType(bad); ok {
			t.Errorf("LookupDType(%q) = %v, true", bad, d)
		}
	}
	if s := DType(0).String(); s != "invalid(0)" || DType(0).ItemSize() != 0 || DType(99).Valid() {
		t.Errorf("invalid dtype: String %q", s)
	}
}

func TestCloneEqual(t *testing.T) {
	a, _ := FromSlice([]int16{1, 2, 3, 4}, 2, 2)
	b := a.Clone()
	if !a.Equal(b) || !b.Equal(a) {
		t.Fatal("clone is not equal")
	}
	b.Data[0] = 9
	b.Shape[0] = 4
	if a.Data[0] != 1 || a.Shape[0] != 2 {
		t.Error("Clone shares memory with the original")
	}
	c := a.Clone()
	c.Shape = []int{4}
	d := a.Clone()
	d.DType = Uint16
	e := a.Clone()
	e.Data[3] ^= 1
	for name, o := range map[string]*Tensor{"shape": c, "dtype": d, "data": e, "nil": nil} {
		if a.Equal(o) {
			t.Errorf("tensors differing in %s are Equal", name)
		}
	}
	var n *Tensor
	if !n.Equal(nil) {
		t.Error("nil tensors are not Equal")
	}
}

func TestDTypeOf(t *testing.T) {
	type myFloat float32
	cases := map[DType]DType{
		DTypeOf[bool](): Bool, DTypeOf[uint8](): Uint8, DTypeOf[int8](): Int8,
		DTypeOf[int16](): Int16, DTypeOf[int32](): Int32, DTypeOf[int64](): Int64,
		DTypeOf[uint16](): Uint16, DTypeOf[uint32](): Uint32, DTypeOf[uint64](): Uint64,
		DTypeOf[Half](): Float16, DTypeOf[BHalf](): BFloat16, DTypeOf[float32](): Float32,
		DTypeOf[float64](): Float64, DTypeOf[complex64](): Complex64, DTypeOf[complex128](): Complex128,
	}
	if len(cases) != 15 {
		t.Fatalf("DTypeOf maps 15 types onto %d dtypes", len(cases))
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("DTypeOf = %v, want %v", got, want)
		}
	}
	// By reflection, named types go by their kind; int, uint and uintptr
	// have no dtype (their size is the host's).
	if d, ok := DTypeOfType(reflect.TypeFor[myFloat]()); !ok || d != Float32 {
		t.Errorf("DTypeOfType(myFloat) = %v, %v", d, ok)
	}
	for _, rt := range []reflect.Type{reflect.TypeFor[int](), reflect.TypeFor[uint](), reflect.TypeFor[uintptr](), reflect.TypeFor[string]()} {
		if d, ok := DTypeOfType(rt); ok {
			t.Errorf("DTypeOfType(%v) = %v", rt, d)
		}
	}
}

func TestValuesBoolBytes(t *testing.T) {
	tt := &Tensor{DType: Bool, Shape: []int{3}, Data: []byte{0, 1, 2}}
	if v, err := Values[bool](tt); err == nil {
		t.Errorf("Values[bool] of byte 2 = %v, want an error", v)
	}
	tt.Data[2] = 1
	if v, err := Values[bool](tt); err != nil || !slices.Equal(v, []bool{false, true, true}) {
		t.Errorf("Values[bool] = %v, %v", v, err)
	}
}
