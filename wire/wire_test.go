package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"omnishm/internal/vectortest"
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
