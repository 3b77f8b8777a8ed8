package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"omnishm/internal/vectortest"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"omnishm/tensor"
	"omnishm/wire"
)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustUnmarshal(t testing.TB, b []byte) any {
	t.Helper()
	v, err := wire.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type inner struct {
	N int `msgpack:"n"`
}

type record struct {
	Name     string         `msgpack:"name"`
	Count    int            `msgpack:"count,omitempty"`
	Tags     []string       `msgpack:"tags,omitempty"`
	Inner    *inner         `msgpack:"inner,omitempty"`
	Plain    bool           // untagged: its Go name
	Skip     int            `msgpack:"-"`
	Extra    map[string]int `msgpack:"extra,omitempty"`
	unexport int
}

func TestMarshalForms(t *testing.T) {
	type myInt int16
	var nilTensor *tensor.Tensor
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"nil", nil, "c0"},
		{"true", true, "c3"},
		{"int 0", 0, "00"},
		{"int8 -1", int8(-1), "ff"},
		{"int -32", -32, "e0"},
		{"int -33", -33, "d0df"},
		{"int16 -129", int16(-129), "d1ff7f"},
		{"int32 min", int32(math.MinInt32), "d280000000"},
		{"int64 min", int64(math.MinInt64), "d38000000000000000"},
		{"uint8 200", uint8(200), "ccc8"},
		{"int 256", 256, "cd0100"},
		{"uint32 max", uint32(math.MaxUint32), "ceffffffff"},
		{"uint64 max", uint64(math.MaxUint64), "cfffffffffffffffff"},
		{"named int", myInt(-2), "fe"},
		{"float64", 1.5, "cb3ff8000000000000"},
		{"float32 widened", float32(1.5), "cb3ff8000000000000"},
		{"str", "ab", "a26162"},
		{"str8", strings.Repeat("x", 32), "d920" + strings.Repeat("78", 32)},
		{"bin", []byte{1, 2}, "c4020102"},
		{"byte array", [2]byte{1, 2}, "c4020102"},
		{"ext 20", wire.Ext{Code: 42, Data: make([]byte, 20)}, "c7142a" + strings.Repeat("00", 20)},
		{"fixext 1", wire.Ext{Code: -1, Data: []byte{5}}, "d4ff05"},
		{"ext pointer", &wire.Ext{Code: -1, Data: []byte{5}}, "d4ff05"},
		{"nil ext pointer", (*wire.Ext)(nil), "c0"},
		{"list", []any{1, "a"}, "9201a161"},
		// Typed numeric slices are the 1-D tensors they are, not lists of
		// Python ints and floats.
		{"typed slice: a 1-D tensor", []int32{1, -1}, "84aa5f5f74656e736f725f5fc3a56474797065a5696e743332a573686170659102a464617461c40801000000ffffffff"},
		{"named element type", []myInt{-2}, "84aa5f5f74656e736f725f5fc3a56474797065a5696e743136a573686170659101a464617461c402feff"},
		{"float32 array", [1]float32{1.5}, "84aa5f5f74656e736f725f5fc3a56474797065a7666c6f61743332a573686170659101a464617461c4040000c03f"},
		{"empty float32 slice", []float32{}, "84aa5f5f74656e736f725f5fc3a56474797065a7666c6f61743332a573686170659100a464617461c400"},
		{"nil float32 slice", []float32(nil), "c0"},
		{"int slice stays a list", []int{1, -1}, "9201ff"},
		{"string slice stays a list", []string{"a"}, "91a161"},
		{"nil slice", []int(nil), "c0"},
		{"empty slice", []int{}, "90"},
		{"nil map", map[string]any(nil), "c0"},
		{"nil bytes", []byte(nil), "c0"},
		{"nil reflect slice", []int16(nil), "c0"},
		{"sorted map", map[string]any{"b": 1, "a": 2}, "82a16102a16201"},
		{"int keyed map", map[int]string{2: "b", 1: "a"}, "8201a16102a162"},
		{"ordered map", wire.Map{{"b", 1}, {"a", 2}}, "82a16201a16102"},
		{"slice as [start, stop, step]", []int{1, 7, 2}, "93010702"},
		{"nil tensor", nilTensor, "c0"},
		{"pointer", func() any { x := 5; return &x }(), "05"},
		{"struct", record{Name: "r", Plain: true, Skip: 9, unexport: 3}, "82a46e616d65a172a5506c61696ec3"},
		{"struct all set", record{Name: "r", Count: 2, Tags: []string{"t"}, Inner: &inner{N: 1}, Extra: map[string]int{"e": 3}},
			"86a46e616d65a172a5636f756e7402a47461677391a174a5696e6e657281a16e01a5506c61696ec2a5657874726181a16503"},
		{"tensor", tensor.Scalar(int8(3)), "84aa5f5f74656e736f725f5fc3a56474797065a4696e7438a5736861706590a464617461c40103"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := wire.Marshal(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if want := mustHex(c.want); !bytes.Equal(got, want) {
				t.Fatalf("got %x, want %x", got, want)
			}
		})
	}
}

// TestOneEntryMaps: one-entry maps in a row at the same depths, their keys
// repeating and changing (a repeat is looked up under the last key, a change
// iterated), encode as {key: value} each, with no allocation once the keys
// were seen.
func TestOneEntryMaps(t *testing.T) {
	cases := []struct {
		v    any
		want string
	}{
		{map[string]any{"a": 1}, "81a16101"},
		{map[string]any{"a": 2}, "81a16102"},
		{map[string]any{"b": 3}, "81a16203"},
		{map[string]any{"b": map[string]any{"a": 4}}, "81a16281a16104"},
		{map[string]any{"b": map[string]any{"c": 5}}, "81a16281a16305"},
		{map[string]any{"a": 6, "b": 7}, "82a16106a16207"},
		{[]any{map[string]any{"c": 8}}, "9181a16308"},
		{map[string]any{"b": map[string]any{"c": 9}}, "81a16281a16309"},
	}
	for i, c := range cases {
		got, err := wire.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if want := mustHex(c.want); !bytes.Equal(got, want) {
			t.Errorf("case %d: got %x, want %x", i, got, want)
		}
	}
	var e wire.Encoder
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() {
		for _, c := range cases {
			if _, err := e.Append(buf[:0], c.v); err != nil {
				t.Fatal(err)
			}
		}
	}); n != 0 {
		t.Errorf("%v allocations per run of seen keys", n)
	}
}

// extHook decodes ext 42 with one byte of data as the tensor that byte
// indexes, as a frame's references do; other extensions are literals.
type extHook []*tensor.Tensor

func (h extHook) DecodeExt(e wire.Ext) (any, bool, error) {
	if e.Code != 42 || len(e.Data) != 1 {
		return nil, false, nil
	}
	if int(e.Data[0]) >= len(h) {
		return nil, false, errors.New("no such tensor")
	}
	return h[e.Data[0]], true, nil
}

// A one-entry map to an extension (a one-tensor frame's tree) is read
// without the general walk; what it yields, or refuses, is the walk's.
func TestOneExtEntryAgrees(t *testing.T) {
	hook := extHook{{DType: tensor.Float32, Shape: []int{0}, Data: []byte{}}}
	cases := []string{
		"81 a4 64617461 d4 2a 00",                   // {"data": ref 0}
		"81 a4 64617461 d4 2a 01",                   // a reference the hook refuses
		"81 a4 64617461 d4 07 00",                   // another code: a literal
		"81 a0 d5 2a 0001",                          // "" and a fixext 2
		"81 a1 61 c7 01 2a 00",                      // ext8
		"81 a1 61 c8 0001 2a 00",                    // ext16
		"81 a1 61 c9 00000001 2a 00",                // ext32
		"81 a1 61 d8 2a" + strings.Repeat("00", 16), // fixext 16
		"81 aa 5f5f74656e736f725f5f d4 2a 00",       // a marker key
		"81 a2 ff fe d4 2a 00",                      // a key that is not UTF-8
		"81 a1 61 c7 05 2a 00",                      // truncated
		"81 a1 61 d4",                               // no ext code
		"81 a1 61 d4 2a 00 00",                      // a trailing byte
		"81 a1 61 01",                               // not an extension
		"82 a1 61 d4 2a 00 a1 62 d4 2a 00",          // two entries
		"81 d9 01 61 d4 2a 00",                      // a str8 key
		"81 a5 6162",                                // a key past the end
	}
	for _, c := range cases {
		b := mustHex(c)
		for _, d := range []wire.Decoder{{}, {Ext: hook}, {Ext: hook, Ordered: true}} {
			got, err := d.Decode(b)
			want, werr := wire.DecodeWalk(&d, b)
			if (err == nil) != (werr == nil) || err != nil && !errors.Is(err, wire.ErrCorrupt) && err.Error() != werr.Error() {
				t.Errorf("%s (hook %v, ordered %v): error %v, the walk's %v", c, d.Ext != nil, d.Ordered, err, werr)
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s (hook %v, ordered %v): %#v, the walk's %#v", c, d.Ext != nil, d.Ordered, got, want)
			}
		}
	}
}

func TestMarshalUnsupported(t *testing.T) {
	cyclic := []any{nil}
	cyclic[0] = cyclic
	type node struct{ Next *node }
	loop := &node{}
	loop.Next = loop
	self := new(any)
	*self = self
	for name, v := range map[string]any{
		"chan":        make(chan int),
		"func":        func() {},
		"complex":     complex(1, 2),
		"cycle":       cyclic,
		"struct loop": loop,
		"self":        self,
		"bad tensor":  &tensor.Tensor{DType: tensor.Int32, Shape: []int{2}, Data: []byte{1}},
		"bad dtype":   &tensor.Tensor{DType: 99},
		"bad array":   &tensor.Array{DType: "?", Shape: []int{1}, Data: []byte{1}},
		"nested chan": map[string]any{"x": []any{make(chan int)}},
	} {
		if _, err := wire.Marshal(v); !errors.Is(err, wire.ErrUnsupported) {
			t.Errorf("%s: err = %v, want ErrUnsupported", name, err)
		}
	}
}

func TestUnmarshalTypes(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want any
	}{
		{"uint64 above int64", "cfffffffffffffffff", uint64(math.MaxUint64)},
		{"uint64 within int64", "cf0000000000000001", int64(1)},
		{"float32", "ca3fc00000", 1.5},
		{"str16", "da0001" + "61", "a"},
		{"non-string key", "82a16101" + "0202", map[any]any{"a": int64(1), int64(2): int64(2)}},
		{"duplicate key: last wins", "82a16101a16102", map[string]any{"a": int64(2)}},
		{"false marker", "81aa5f5f74656e736f725f5fc2", map[string]any{"__tensor__": false}},
		{"array16", "dc0002c0c3", []any{nil, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := wire.Unmarshal(mustHex(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if gm, ok := got.(map[any]any); ok {
				wm := c.want.(map[any]any)
				if len(gm) != len(wm) || gm["a"] != wm["a"] || gm[int64(2)] != wm[int64(2)] {
					t.Fatalf("got %#v, want %#v", got, c.want)
				}
				return
			}
			if err := vectortest.SameValue(got, c.want); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestUnmarshalNeverAliasesInput(t *testing.T) {
	payload := map[string]any{
		"t": tensor.Scalar(int64(7)), "b": []byte{1, 2, 3}, "s": "str",
		"e": wire.Ext{Code: 5, Data: []byte{4}},
		"a": &tensor.Array{DType: "|u1", Shape: []int{1}, Data: []byte{9}},
	}
	in := mustMarshal(t, payload)
	got := mustUnmarshal(t, in)
	for i := range in {
		in[i] = 0xff // the ring slot is reused
	}
	if err := vectortest.SameValue(got, payload); err != nil {
		t.Fatalf("decoded value changed with its input: %v", err)
	}
}

func TestUnmarshalCorrupt(t *testing.T) {
	tensorMap := func(dtype, shape, data string) string {
		return "84aa5f5f74656e736f725f5fc3a56474797065" + dtype + "a573686170" + "65" + shape + "a464617461" + data
	}
	deep := strings.Repeat("91", 600) + "c0"
	cases := map[string]string{
		"empty":                 "",
		"truncated int":         "cd01",
		"truncated str":         "a3616263"[:6],
		"str length past end":   "dbffffffff61",
		"bin length past end":   "c6ffffffff00",
		"array length past end": "ddffffffff",
		"map length past end":   "dfffffffff",
		"ext past end":          "c9ffffffff2a",
		"fixext truncated":      "d82a00",
		"reserved byte":         "c1",
		"trailing bytes":        "c0c0",
		"invalid utf-8":         "a2c328",
		"depth bomb":            deep,
		"unhashable key":        "8190c0",
		"tensor unknown dtype":  tensorMap("a3786978", "9101", "c40100"),
		"tensor shape mismatch": tensorMap("a4696e7438", "9102", "c40100"),
		"tensor negative dim":   tensorMap("a4696e7438", "91ff", "c400"),
		"tensor data not bin":   tensorMap("a4696e7438", "9101", "01"),
		"tensor missing fields": "81aa5f5f74656e736f725f5fc3",
		"ndarray bad dtype":     "84ab5f5f6e6461727261795f5fc3a56474797065a1" + "78" + "a5736861706590a464617461c400",
		"image without mode":    "83ad5f5f70696c5f696d6167655f5fc3a5736861706590a464617461c400",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := wire.Unmarshal(mustHex(in)); !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestOrderedDecodeKeepsWireOrder(t *testing.T) {
	in := mustHex("82a162c0a161c3")
	got, err := (&wire.Decoder{Ordered: true}).Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	m := got.(wire.Map)
	if len(m) != 2 || m[0].Key != "b" || m[1].Key != "a" {
		t.Fatalf("got %#v", m)
	}
	if v, ok := m.Get("a"); !ok || v != true {
		t.Fatalf("Get(a) = %v, %v", v, ok)
	}
}

func TestUnmarshalOwnedAliasesOnlyLargeBins(t *testing.T) {
	big := make([]byte, wire.OwnedAliasMin)
	big[0] = 7
	b := mustMarshal(t, map[string]any{"big": big, "small": []byte{1, 2, 3}})
	v, err := wire.UnmarshalOwned(b)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	gotBig, gotSmall := m["big"].([]byte), m["small"].([]byte)
	inside := func(p []byte) bool {
		start, end := &b[0], &b[len(b)-1]
		return uintptr(unsafe.Pointer(&p[0])) >= uintptr(unsafe.Pointer(start)) && uintptr(unsafe.Pointer(&p[0])) <= uintptr(unsafe.Pointer(end))
	}
	if len(gotBig) != len(big) || gotBig[0] != 7 || !inside(gotBig) || cap(gotBig) != len(gotBig) {
		t.Fatalf("large bin: len %d cap %d aliases=%v", len(gotBig), cap(gotBig), inside(gotBig))
	}
	if string(gotSmall) != "\x01\x02\x03" || inside(gotSmall) {
		t.Fatal("a small bin must be copied, not pin the buffer")
	}
	// Plain Unmarshal never aliases.
	v, _ = wire.Unmarshal(b)
	if inside(v.(map[string]any)["big"].([]byte)) {
		t.Fatal("Unmarshal aliased its input")
	}
}

// decodeTarget has a field of each kind Decode fills.
type decodeTarget struct {
	Name    string            `msgpack:"name"`
	Count   int8              `msgpack:"count,omitempty"`
	Ratio   float32           `msgpack:"ratio"`
	Hidden  []float32         `msgpack:"hidden"`
	Codes   *tensor.Tensor    `msgpack:"codes"`
	Mask    [2]bool           `msgpack:"mask"`
	Labels  map[int]string    `msgpack:"labels"`
	Inner   *inner            `msgpack:"inner"`
	Raw     []byte            `msgpack:"raw"`
	Any     any               `msgpack:"any"`
	Done    bool              `msgpack:"done"`
	ByName  map[string][]int8 `msgpack:"by_name"`
	Plain   uint16            // untagged: its Go name
	Skipped string            `msgpack:"-"`
}

func TestDecodeRoundTrip(t *testing.T) {
	codes, _ := tensor.FromSlice([]int64{1, 2, 3, 4}, 2, 2)
	in := decodeTarget{
		Name: "r", Count: -3, Ratio: 0.25, Hidden: []float32{0.5, -1.5}, Codes: codes,
		Mask: [2]bool{true, false}, Labels: map[int]string{1: "a", -2: "b"}, Inner: &inner{N: 7},
		Raw: []byte{0, 0xff}, Any: []any{int64(1), "x"}, Done: true,
		ByName: map[string][]int8{"k": {-1, 2}}, Plain: 9, Skipped: "never sent",
	}
	tree := mustUnmarshal(t, mustMarshal(t, in))
	var got decodeTarget
	if err := wire.Decode(tree, &got); err != nil {
		t.Fatal(err)
	}
	want := in
	want.Skipped = ""
	if err := vectortest.SameValue(mustUnmarshal(t, mustMarshal(t, got)), mustUnmarshal(t, mustMarshal(t, want))); err != nil {
		t.Fatalf("decoded %+v: %v", got, err)
	}
	if got.Labels[-2] != "b" || got.Hidden[1] != -1.5 || got.Mask != want.Mask || !got.Codes.Equal(codes) {
		t.Fatalf("decoded %+v", got)
	}
}

func TestDecodeForms(t *testing.T) {
	f32, _ := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	halves, _ := tensor.FromSlice([]tensor.Half{tensor.HalfFrom(1.5)})
	five := 5
	type code int32
	type codes []code
	cases := []struct {
		name    string
		payload any
		into    any // a pointer to a zero value
		want    any
	}{
		{"int keys", map[any]any{int64(1): "a", int64(2): "b"}, new(map[int]string), map[int]string{1: "a", 2: "b"}},
		{"string keys", map[string]any{"a": int64(1)}, new(map[string]int16), map[string]int16{"a": 1}},
		{"any shape of tensor into a slice", f32, new([]float32), []float32{1, 2, 3, 4, 5, 6}},
		{"list into a float32 slice", []any{1.5, int64(2)}, new([]float32), []float32{1.5, 2}},
		{"list into an int8 slice", []any{int64(-128), int64(127)}, new([]int8), []int8{-128, 127}},
		{"named element type", []any{int64(7)}, new(codes), codes{7}},
		{"int32 tensor into a named slice", mustTensor(tensor.FromSlice([]int32{7, -8})), new(codes), codes{7, -8}},
		{"ndarray", &tensor.Array{DType: "<f4", Shape: []int{1}, Data: []byte{0, 0, 0xc0, 0x3f}}, new([]float32), []float32{1.5}},
		{"half tensor", halves, new([]tensor.Half), []tensor.Half{tensor.HalfFrom(1.5)}},
		{"float into half", 1.5, new(tensor.Half), tensor.HalfFrom(1.5)},
		{"0-d bool tensor into bool", tensor.Scalar(true), new(bool), true},
		{"0-d int tensor into int8", tensor.Scalar(int64(-4)), new(int8), int8(-4)},
		{"bin into bytes", []byte{1, 2}, new([]byte), []byte{1, 2}},
		{"bin into a byte array", []byte{1, 2}, new([2]byte), [2]byte{1, 2}},
		{"uint64", uint64(math.MaxUint64), new(uint64), uint64(math.MaxUint64)},
		{"exact int into float64", int64(1) << 53, new(float64), float64(1 << 53)},
		{"float64 rounds to float32", 0.1, new(float32), float32(0.1)},
		{"nil into a pointer", nil, new(*int), (*int)(nil)},
		{"int into a pointer", int64(5), new(*int), &five},
		{"nil into a slice", nil, new([]int), []int(nil)},
		{"tensor value", f32, new(tensor.Tensor), *f32},
		{"any keeps the value", []any{"x"}, new(any), []any{"x"}},
		{"ordered map into a struct", wire.Map{{Key: "n", Value: int64(1)}, {Key: "n", Value: int64(2)}}, new(inner), inner{N: 2}},
		{"unknown keys are ignored", map[string]any{"n": int64(1), "other": "x"}, new(inner), inner{N: 1}},
		{"missing keys leave the field", map[string]any{}, new(inner), inner{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := wire.Decode(c.payload, c.into); err != nil {
				t.Fatal(err)
			}
			got := reflect.ValueOf(c.into).Elem().Interface()
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

func mustTensor(t *tensor.Tensor, err error) *tensor.Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

func TestDecodeMismatch(t *testing.T) {
	f32 := mustTensor(tensor.FromSlice([]float32{1}))
	type audio struct {
		Audio []int64 `msgpack:"audio"`
	}
	type chunk struct {
		Codes audio `msgpack:"codes"`
	}
	cases := []struct {
		name    string
		payload any
		into    any
		want    string
	}{
		{"tensor dtype", map[string]any{"codes": map[string]any{"audio": f32}}, new(chunk),
			"at .codes.audio: want int64 tensor, got float32 tensor"},
		{"out of range", int64(300), new(int8), "at .: want int8, got int64 300 (out of range)"},
		{"element out of range", []any{int64(1), int64(300)}, new([]int8), "at [1]: want int8, got int64 300 (out of range)"},
		{"negative into uint", int64(-1), new(uint), "at .: want uint, got int64 -1 (out of range)"},
		{"above int64", uint64(math.MaxUint64), new(int64), "at .: want int64, got uint64 18446744073709551615 (out of range)"},
		{"float into int", 1.5, new(int), "at .: want int, got float64"},
		{"inexact int into float", int64(1)<<53 + 1, new(float64), "at .: want float64, got int64"},
		{"float32 overflow", 1e300, new(float32), "at .: want float32, got float64 1e+300 (out of range)"},
		{"nil into int", nil, new(int), "at .: want int, got nil"},
		{"string key into int key", map[string]any{"a": "x"}, new(map[int]string), "at .a: want int keys, got string key"},
		{"int key into string key", map[any]any{int64(1): "x"}, new(map[string]string), "at .[1]: want string keys, got int64 key"},
		{"array length", []any{int64(1)}, new([2]int), "at .: want [2]int, got list of 1"},
		{"tensor length into an array", f32, new([2]float32), "at .: want [2]float32, got float32 tensor of 1"},
		{"struct from a list", []any{}, new(inner), "at .: want map for wire_test.inner, got list"},
		{"tensor from a map", map[string]any{}, new(*tensor.Tensor), "at .: want tensor, got map"},
		{"list from a string", "x", new([]string), "at .: want list, got string"},
		{"numeric slice from a string", "x", new([]float32), "at .: want float32 tensor or list, got string"},
		{"bool byte", &tensor.Tensor{DType: tensor.Bool, Shape: []int{2}, Data: []byte{1, 2}}, new([]bool), "at [1]: bool element is 0x2, not 0 or 1"},
		{"big-endian ndarray", &tensor.Array{DType: ">f4", Shape: []int{1}, Data: make([]byte, 4)}, new([]float32), "at .: want float32 ndarray, got ndarray >f4"},
		{"interface not implemented", int64(1), new(error), "at .: want error, got int64"},
		{"unhashable key of an ordered map", wire.Map{{Key: []any{int64(1)}, Value: int64(0)}}, new(map[any]int), "at .[[1]]: list key cannot be a map key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := wire.Decode(c.payload, c.into)
			if !errors.Is(err, wire.ErrMismatch) {
				t.Fatalf("err = %v, want ErrMismatch", err)
			}
			if want := "wire: mismatch " + c.want; err.Error() != want {
				t.Fatalf("err = %q\nwant  %q", err, want)
			}
		})
	}
}

func TestDecodeUnsupported(t *testing.T) {
	var ch chan int
	for name, into := range map[string]any{
		"nil":         nil,
		"not pointer": 5,
		"nil pointer": (*int)(nil),
		"chan":        &ch,
	} {
		if err := wire.Decode(int64(1), into); !errors.Is(err, wire.ErrUnsupported) {
			t.Errorf("%s: err = %v, want ErrUnsupported", name, err)
		}
	}
}

func TestDecodeSelfPointerEnds(t *testing.T) {
	type P *P
	var p P
	if err := wire.Decode(int64(1), &p); !errors.Is(err, wire.ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
}
