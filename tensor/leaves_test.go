package tensor

import (
	"errors"
	"testing"
)

func TestNumpyItemSize(t *testing.T) {
	good := map[string]int{
		"<f4": 4, "<f2": 2, ">f8": 8, "|b1": 1, "|u1": 1, "|i1": 1, "<i8": 8, "=u2": 2,
		"<c8": 8, "<c16": 16, "<c32": 32, "<f16": 16, "|S5": 5, "|V8": 8, "<U3": 12, ">U1": 4,
	}
	for s, want := range good {
		if got, err := NumpyItemSize(s); err != nil || got != want {
			t.Errorf("NumpyItemSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "f4", "<f", "float32", "<x4", "!f4", "<f0", "<f-1", "<f+4", "<f4x", "<f 4", "<S99999999", "|O8", "<M8[ns]", "<f3", "|b2", "<i3", "<c4", "<u16"} {
		if got, err := NumpyItemSize(s); !errors.Is(err, ErrUnknownDType) {
			t.Errorf("NumpyItemSize(%q) = %d, %v; want ErrUnknownDType", s, got, err)
		}
	}
}

func TestArrayValidate(t *testing.T) {
	cases := []struct {
		name string
		a    Array
		want error
	}{
		{"ok", Array{"<f4", []int{2, 3}, make([]byte, 24)}, nil},
		{"ok 0-d", Array{"<i8", []int{}, make([]byte, 8)}, nil},
		{"ok empty", Array{"<f2", []int{0, 4}, nil}, nil},
		{"ok unicode", Array{"<U2", []int{3}, make([]byte, 24)}, nil},
		{"bad dtype", Array{"float32", []int{1}, make([]byte, 4)}, ErrUnknownDType},
		{"short", Array{"<f8", []int{2}, make([]byte, 15)}, ErrShape},
		{"long", Array{"|u1", []int{2}, make([]byte, 3)}, ErrShape},
		{"negative", Array{"|u1", []int{-2}, nil}, ErrShape},
		{"overflow", Array{"<c16", []int{1 << 40, 1 << 40}, nil}, ErrShape},
	}
	for _, c := range cases {
		err := c.a.Validate()
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: Validate = %v, want %v", c.name, err, c.want)
		}
	}
	a := &Array{"<f4", []int{1}, []byte{1, 2, 3, 4}}
	for name, o := range map[string]*Array{
		"dtype": {">f4", []int{1}, []byte{1, 2, 3, 4}},
		"shape": {"<f4", []int{1, 1}, []byte{1, 2, 3, 4}},
		"data":  {"<f4", []int{1}, []byte{1, 2, 3, 5}},
	} {
		if a.Equal(o) {
			t.Errorf("arrays differing in %s are Equal", name)
		}
	}
	if !a.Equal(&Array{"<f4", []int{1}, []byte{1, 2, 3, 4}}) {
		t.Error("equal arrays are not Equal")
	}
}

func TestImageValidate(t *testing.T) {
	cases := []struct {
		name string
		m    Image
		want error
	}{
		{"rgb", Image{"RGB", []int{2, 3, 3}, make([]byte, 18)}, nil},
		{"grey", Image{"L", []int{2, 3}, make([]byte, 6)}, nil},
		{"empty", Image{"L", []int{0, 3}, nil}, nil},
		{"no mode", Image{"", []int{1, 1}, make([]byte, 1)}, ErrShape},
		{"short", Image{"RGBA", []int{1, 2, 4}, make([]byte, 7)}, ErrShape},
		{"negative", Image{"L", []int{-1, 1}, nil}, ErrShape},
		{"overflow", Image{"L", []int{1 << 32, 1 << 32}, nil}, ErrShape},
	}
	for _, c := range cases {
		err := c.m.Validate()
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: Validate = %v, want %v", c.name, err, c.want)
		}
	}
	m := &Image{"L", []int{1, 2}, []byte{1, 2}}
	if !m.Equal(&Image{"L", []int{1, 2}, []byte{1, 2}}) {
		t.Error("equal images are not Equal")
	}
	for name, o := range map[string]*Image{
		"mode":  {"P", []int{1, 2}, []byte{1, 2}},
		"shape": {"L", []int{2, 1}, []byte{1, 2}},
		"data":  {"L", []int{1, 2}, []byte{1, 3}},
	} {
		if m.Equal(o) {
			t.Errorf("images differing in %s are Equal", name)
		}
	}
}

// errAny in a table stands for an error of no particular kind.
var errAny = errors.New("any error")

func TestNewLeaf(t *testing.T) {
	cases := []struct {
		kind  Kind
		name  string
		shape []int
		data  []byte
		want  any // the leaf, or the error it wraps
	}{
		{KindTensor, "int16", []int{2}, []byte{1, 0, 2, 0}, &Tensor{Int16, []int{2}, []byte{1, 0, 2, 0}}},
		{KindTensor, "int16", []int{3}, []byte{1, 0, 2, 0}, ErrShape},
		{KindTensor, "<i2", []int{2}, []byte{1, 0, 2, 0}, ErrUnknownDType},
		{KindArray, "<i2", []int{2}, []byte{1, 0, 2, 0}, &Array{"<i2", []int{2}, []byte{1, 0, 2, 0}}},
		{KindArray, "int16", []int{2}, []byte{1, 0, 2, 0}, ErrUnknownDType},
		{KindImage, "L", []int{1, 2}, []byte{7, 8}, &Image{"L", []int{1, 2}, []byte{7, 8}}},
		{KindImage, "", []int{1, 2}, []byte{7, 8}, ErrShape},
		{KindImage, "RGB", []int{1, 2, 3}, []byte{7, 8}, ErrShape},
		{Kind(0), "int16", nil, nil, errAny},
	}
	for _, c := range cases {
		got, err := NewLeaf(c.kind, c.name, c.shape, c.data)
		if want, isErr := c.want.(error); isErr {
			if err == nil || want != errAny && !errors.Is(err, want) || got != nil {
				t.Errorf("NewLeaf(%v, %q, %v) = %#v, %v; want nil, %v", c.kind, c.name, c.shape, got, err, want)
			}
			continue
		}
		equal := false
		switch w := c.want.(type) {
		case *Tensor:
			g, ok := got.(*Tensor)
			equal = ok && g.Equal(w)
		case *Array:
			g, ok := got.(*Array)
			equal = ok && g.Equal(w)
		case *Image:
			g, ok := got.(*Image)
			equal = ok && g.Equal(w)
		}
		if err != nil || !equal {
			t.Errorf("NewLeaf(%v, %q, %v) = %#v, %v; want %#v", c.kind, c.name, c.shape, got, err, c.want)
		}
	}
	for k, want := range map[Kind][2]string{KindTensor: {"tensor", "dtype"}, KindArray: {"ndarray", "dtype"}, KindImage: {"image", "mode"}} {
		if k.String() != want[0] || k.NameField() != want[1] {
			t.Errorf("kind %d: String %q, NameField %q; want %q", k, k.String(), k.NameField(), want)
		}
	}
}
