package jsonform

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"omnishm/tensor"
	"omnishm/wire"
)

func TestFloatText(t *testing.T) {
	// Expected texts are Python's repr of the same float64.
	cases := []struct {
		f    float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{-1.5, "-1.5"},
		{0.1, "0.1"},
		{0.25, "0.25"},
		{1e15, "1000000000000000.0"},
		{1e16, "1e+16"},
		{1.5e16, "1.5e+16"},
		{123456789, "123456789.0"},
		{1.5e-05, "1.5e-05"},
		{0.0001, "0.0001"},
		{0.00012345, "0.00012345"},
		{1e-300, "1e-300"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{float64(float32(0.1)), "0.10000000149011612"},
		{9007199254740993, "9007199254740992.0"},
		{1e22, "1e+22"},
		{math.NaN(), "NaN"},
		{math.Inf(1), "Infinity"},
		{math.Inf(-1), "-Infinity"},
	}
	for _, c := range cases {
		if got := floatText(c.f); got != c.want {
			t.Errorf("floatText(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

func TestMarshalScalars(t *testing.T) {
	type code int32
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"nil", nil, "null"},
		{"true", true, "true"},
		{"int", 42, "42"},
		{"int8", int8(-128), "-128"},
		{"int64 min", int64(math.MinInt64), "-9223372036854775808"},
		{"uint64 max", uint64(math.MaxUint64), "18446744073709551615"},
		{"uint8", uint8(255), "255"},
		{"float32", float32(0.5), "0.5"},
		{"float whole", 2.0, "2.0"},
		{"nan", math.NaN(), `"NaN"`},
		{"-inf", math.Inf(-1), `"-Infinity"`},
		{"string", "a\"b\\c", `"a\"b\\c"`},
		{"control", "\x00\x01\n\t\r\b\f\x1f\x7f", `"\u0000\u0001\n\t\r\b\f\u001f\u007f"`},
		{"unicode", "ünï日本", `"\u00fcn\u00ef\u65e5\u672c"`},
		{"astral", "😀", `"\ud83d\ude00"`},
		{"separators", "\u2028\u2029", `"\u2028\u2029"`},
		{"invalid utf8", "a\xffb", `"a\ufffdb"`},
		{"bytes", []byte{0, 1, 0xfe, 0xff}, `{"$bytes":"AAH+/w=="}`},
		{"empty bytes", []byte{}, `{"$bytes":""}`},
		{"list", []any{int64(1), "x", nil}, `[1,"x",null]`},
		{"typed list", []int{1, 2}, `[1,2]`},
		{"empty list", []any{}, `[]`},
		{"sorted map", map[string]any{"b": 1, "a": 2, "$bytes": 3, "": 4}, `{"":4,"$bytes":3,"a":2,"b":1}`},
		{"any keys", map[any]any{int64(2): "x", "a": "y", true: nil, nil: 1.5}, `{"2":"x","a":"y","null":1.5,"true":null}`},
		{"wire map", wire.Map{{Key: "z", Value: 1}, {Key: "a", Value: 2}}, `{"a":2,"z":1}`},
		{"ext", wire.Ext{Code: -3, Data: []byte{1, 2}}, `{"$ext":{"code":-3,"data":"AQI="}}`},
		{"ext ptr", &wire.Ext{Code: 42}, `{"$ext":{"code":42,"data":""}}`},
		{"nil tensor", (*tensor.Tensor)(nil), "null"},
		{"tensor", tensor.Scalar(int32(7)), `{"$tensor":{"data":"BwAAAA==","dtype":"int32","shape":[]}}`},
		{"tensor value", *tensor.Scalar(true), `{"$tensor":{"data":"AQ==","dtype":"bool","shape":[]}}`},
		{"array", &tensor.Array{DType: "<f2", Shape: []int{1, 2}, Data: []byte{0, 0x3c, 0, 0x40}}, `{"$ndarray":{"data":"ADwAQA==","dtype":"<f2","shape":[1,2]}}`},
		{"image", &tensor.Image{Mode: "L", Shape: []int{1, 2}, Data: []byte{9, 10}}, `{"$image":{"data":"CQo=","mode":"L","shape":[1,2]}}`},
		// A typed numeric slice prints as the 1-D tensor it travels as
		// (wire's Encoder); other slices stay lists.
		{"float32 slice", []float32{1, 2}, `{"$tensor":{"data":"AACAPwAAAEA=","dtype":"float32","shape":[2]}}`},
		{"int64", []int64{-1}, `{"$tensor":{"data":"//////////8=","dtype":"int64","shape":[1]}}`},
		{"empty float64", []float64{}, `{"$tensor":{"data":"","dtype":"float64","shape":[0]}}`},
		{"bool array", [2]bool{true, false}, `{"$tensor":{"data":"AQA=","dtype":"bool","shape":[2]}}`},
		{"named", []code{7}, `{"$tensor":{"data":"BwAAAA==","dtype":"int32","shape":[1]}}`},
		{"half", []tensor.Half{0x3c00}, `{"$tensor":{"data":"ADw=","dtype":"float16","shape":[1]}}`},
		{"in a map", map[string]any{"h": []uint16{1}}, `{"h":{"$tensor":{"data":"AQA=","dtype":"uint16","shape":[1]}}}`},
		{"nil", []float32(nil), "null"},
		{"ints stay a list", []int{1, 2}, "[1,2]"},
		{"bytes stay bytes", [2]uint8{1, 2}, `{"$bytes":"AQI="}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Marshal(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("Marshal = %s, want %s", got, c.want)
			}
			// The Go value and the payload a receiver decodes from it
			// print alike.
			b, err := wire.Marshal(c.v)
			if err != nil {
				t.Fatal(err)
			}
			back, err := wire.Unmarshal(b)
			if c.name == "invalid utf8" && errors.Is(err, wire.ErrCorrupt) {
				return // wire writes it as is, and its decoder refuses it
			}
			if err != nil {
				t.Fatal(err)
			}
			if decoded, err := Marshal(back); err != nil || string(decoded) != string(got) {
				t.Errorf("the decoded payload prints %s (%v), the Go value %s", decoded, err, got)
			}
		})
	}
}

func TestMarshalUnsupported(t *testing.T) {
	cyclic := []any{nil}
	cyclic[0] = cyclic
	cases := []struct {
		name string
		v    any
	}{
		{"chan", make(chan int)},
		{"func", func() {}},
		{"complex", complex(1, 2)},
		{"slice key", map[any]any{[2]int{1, 2}: 1}},
		{"duplicate key text", map[any]any{int64(1): "a", "1": "b"}},
		{"bad tensor", &tensor.Tensor{DType: tensor.Float32, Shape: []int{2}, Data: make([]byte, 4)}},
		{"bad dtype", &tensor.Tensor{DType: 99, Shape: []int{}, Data: nil}},
		{"bad array", &tensor.Array{DType: "f4", Shape: []int{1}, Data: make([]byte, 4)}},
		{"bad image", &tensor.Image{Mode: "", Shape: []int{1}, Data: make([]byte, 1)}},
		{"cycle", cyclic},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if b, err := Marshal(c.v); !errors.Is(err, ErrUnsupported) {
				t.Fatalf("Marshal = %q, %v; want ErrUnsupported", b, err)
			}
		})
	}
}

func TestUnmarshalValues(t *testing.T) {
	v, err := Unmarshal([]byte(` {"i":[0,-1,9223372036854775807,-9223372036854775808,9223372036854775808,18446744073709551615],
		"f":[1.0,1e16,1E-5,-0.0,2.5e+3,1e400],"s":["NaN","\u00fc\ud83d\ude00"],"n":null,"b":[true,false],
		"o":{"$bytes":"AAH+/w==","x":1},"e":{},"l":[]} `))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	ints := m["i"].([]any)
	wantInts := []any{int64(0), int64(-1), int64(math.MaxInt64), int64(math.MinInt64), uint64(1 << 63), uint64(math.MaxUint64)}
	for i, w := range wantInts {
		if ints[i] != w {
			t.Errorf("int %d = %#v, want %#v", i, ints[i], w)
		}
	}
	floats := m["f"].([]any)
	wantFloats := []float64{1, 1e16, 1e-5, math.Copysign(0, -1), 2500, math.Inf(1)}
	for i, w := range wantFloats {
		f, ok := floats[i].(float64)
		if !ok || math.Float64bits(f) != math.Float64bits(w) {
			t.Errorf("float %d = %#v, want %v", i, floats[i], w)
		}
	}
	strs := m["s"].([]any)
	if strs[0] != "NaN" || strs[1] != "ü😀" {
		t.Errorf("strings = %#v", strs)
	}
	// A marker key next to other keys is an ordinary map key.
	o := m["o"].(map[string]any)
	if o["$bytes"] != "AAH+/w==" || o["x"] != int64(1) {
		t.Errorf("object with marker key and others = %#v", o)
	}
	if m["n"] != nil || len(m["e"].(map[string]any)) != 0 || len(m["l"].([]any)) != 0 {
		t.Errorf("null/empty = %#v %#v %#v", m["n"], m["e"], m["l"])
	}
}

func TestUnmarshalLeaves(t *testing.T) {
	v, err := Unmarshal([]byte(`[{"$bytes":"AQI="},
		{"$tensor":{"dtype":"float16","shape":[2],"data":"ADwAQA=="}},
		{"$ndarray":{"dtype":"<i4","shape":[1],"data":"BwAAAA=="}},
		{"$image":{"mode":"RGB","shape":[1,1,3],"data":"AQID"}},
		{"$ext":{"code":-128,"data":""}},
		{"$tensor":{"dtype":"int64","shape":[0,3],"data":""}}]`))
	if err != nil {
		t.Fatal(err)
	}
	l := v.([]any)
	if b, ok := l[0].([]byte); !ok || string(b) != "\x01\x02" {
		t.Errorf("bytes = %#v", l[0])
	}
	want := &tensor.Tensor{DType: tensor.Float16, Shape: []int{2}, Data: []byte{0, 0x3c, 0, 0x40}}
	if tt, ok := l[1].(*tensor.Tensor); !ok || !tt.Equal(want) {
		t.Errorf("tensor = %v, want %v", l[1], want)
	}
	if a, ok := l[2].(*tensor.Array); !ok || !a.Equal(&tensor.Array{DType: "<i4", Shape: []int{1}, Data: []byte{7, 0, 0, 0}}) {
		t.Errorf("array = %#v", l[2])
	}
	if m, ok := l[3].(*tensor.Image); !ok || !m.Equal(&tensor.Image{Mode: "RGB", Shape: []int{1, 1, 3}, Data: []byte{1, 2, 3}}) {
		t.Errorf("image = %#v", l[3])
	}
	if e, ok := l[4].(wire.Ext); !ok || e.Code != -128 || len(e.Data) != 0 {
		t.Errorf("ext = %#v", l[4])
	}
	if tt, ok := l[5].(*tensor.Tensor); !ok || !tt.Equal(&tensor.Tensor{DType: tensor.Int64, Shape: []int{0, 3}, Data: []byte{}}) {
		t.Errorf("empty tensor = %v", l[5])
	}
}

func TestUnmarshalErrors(t *testing.T) {
	cases := []struct {
		name, in, msg string
		also          error
	}{
		{"empty", ``, "EOF", nil},
		{"syntax", `{"a":}`, "invalid character", nil},
		{"trailing", `1 2`, "data after", nil},
		{"nan literal", `NaN`, "invalid character", nil},
		{"big int", `18446744073709551616`, "64-bit range", nil},
		{"small int", `[-9223372036854775809]`, "at [0]", nil},
		{"bytes not string", `{"$bytes":1}`, "want a base64 string", nil},
		{"bad base64", `{"$bytes":"AQ"}`, "base64", nil},
		{"unpadded base64", `{"$bytes":"AQI"}`, "base64", nil},
		{"url base64", `{"$bytes":"-_8="}`, "base64", nil},
		{"tensor not object", `{"$tensor":[]}`, "want an object", nil},
		{"tensor missing data", `{"$tensor":{"dtype":"int8","shape":[1]}}`, `missing "data"`, nil},
		{"tensor extra field", `{"$tensor":{"dtype":"int8","shape":[1],"data":"AA==","x":1}}`, `unexpected field "x"`, nil},
		{"tensor bad dtype", `{"$tensor":{"dtype":"float8","shape":[1],"data":"AA=="}}`, "float8", tensor.ErrUnknownDType},
		{"tensor dtype not string", `{"$tensor":{"dtype":3,"shape":[1],"data":"AA=="}}`, ".dtype: ", nil},
		{"tensor short data", `{"$tensor":{"dtype":"int16","shape":[2],"data":"AAA="}}`, "needs 4 bytes, have 2", tensor.ErrShape},
		{"tensor negative dim", `{"$tensor":{"dtype":"int8","shape":[-1],"data":""}}`, "non-negative", nil},
		{"tensor float dim", `{"$tensor":{"dtype":"int8","shape":[1.0],"data":"AA=="}}`, "non-negative integer", nil},
		{"tensor huge shape", `{"$tensor":{"dtype":"int64","shape":[4294967296,4294967296],"data":""}}`, "overflows", tensor.ErrShape},
		{"tensor shape not array", `{"$tensor":{"dtype":"int8","shape":1,"data":"AA=="}}`, "want an array", nil},
		{"nested path", `{"a":[1,{"$tensor":{"dtype":"x","shape":[],"data":""}}]}`, `at ."a"[1].$tensor`, nil},
		{"ndarray bad dtype", `{"$ndarray":{"dtype":"f4","shape":[1],"data":"AAAAAA=="}}`, "numpy dtype", tensor.ErrUnknownDType},
		{"ndarray mismatch", `{"$ndarray":{"dtype":"<f4","shape":[2],"data":"AAAAAA=="}}`, "needs 8 bytes", tensor.ErrShape},
		{"image no mode", `{"$image":{"mode":"","shape":[1],"data":"AA=="}}`, "mode", tensor.ErrShape},
		{"image missing mode", `{"$image":{"shape":[1],"data":"AA=="}}`, `missing "mode"`, nil},
		{"ext code range", `{"$ext":{"code":128,"data":""}}`, "[-128, 127]", nil},
		{"ext code float", `{"$ext":{"code":1.0,"data":""}}`, "[-128, 127]", nil},
		{"ext code string", `{"$ext":{"code":"1","data":""}}`, "want an integer", nil},
		{"ext data", `{"$ext":{"code":1,"data":null}}`, ".data: ", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := Unmarshal([]byte(c.in))
			if err == nil {
				t.Fatalf("Unmarshal(%s) = %#v, want an error", c.in, v)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if c.also != nil && !errors.Is(err, c.also) {
				t.Errorf("error %q does not wrap %v", err, c.also)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not mention %q", err, c.msg)
			}
		})
	}
}

// reprint prints v, reads that text back and prints what it read: for any
// value Marshal prints, first and second must be the same text.
func reprint(v any) (first []byte, back any, second []byte, err error) {
	if first, err = Marshal(v); err != nil {
		return nil, nil, nil, err
	}
	if back, err = Unmarshal(first); err != nil {
		return nil, nil, nil, fmt.Errorf("Unmarshal(%s) of Marshal's output: %w", first, err)
	}
	second, err = Marshal(back)
	return first, back, second, err
}

// TestRoundTrip: Marshal then Unmarshal then Marshal gives the same text,
// for every dtype and the other leaves.
func TestRoundTrip(t *testing.T) {
	var vals []any
	for d := tensor.Bool; d <= tensor.Complex128; d++ {
		z, err := tensor.Zeros(d, 2, 3)
		if err != nil {
			t.Fatal(err)
		}
		for i := range z.Data {
			z.Data[i] = byte(i * 7)
		}
		if d == tensor.Bool {
			for i := range z.Data {
				z.Data[i] &= 1
			}
		}
		vals = append(vals, z)
	}
	vals = append(vals,
		map[string]any{"nan": math.NaN(), "ints": []any{int64(math.MinInt64), uint64(math.MaxUint64)}, "f": 1e-7},
		[]byte("\x00hello"),
		wire.Ext{Code: 42, Data: make([]byte, 20)},
		&tensor.Array{DType: "<c8", Shape: []int{1}, Data: make([]byte, 8)},
		&tensor.Image{Mode: "RGBA", Shape: []int{1, 1, 4}, Data: []byte{1, 2, 3, 4}},
	)
	for _, v := range vals {
		first, back, second, err := reprint(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(first) != string(second) {
			t.Errorf("round trip changed\n %s\nto\n %s", first, second)
		}
		if tt, ok := v.(*tensor.Tensor); ok && !tt.Equal(back.(*tensor.Tensor)) {
			t.Errorf("tensor %v read back as %v", tt, back)
		}
	}
}

func TestMarshalIndent(t *testing.T) {
	got, err := MarshalIndent(map[string]any{"a": []any{1.0, int64(2)}}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n \"a\": [\n  1.0,\n  2\n ]\n}"
	if string(got) != want {
		t.Errorf("MarshalIndent = %q, want %q", got, want)
	}
}
