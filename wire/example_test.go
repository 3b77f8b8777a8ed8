package wire_test

import (
	"fmt"

	"omnishm/tensor"
	"omnishm/wire"
)

func ExampleMarshal() {
	codes, _ := tensor.FromSlice([]int64{1, 2, 3})
	b, err := wire.Marshal(map[string]any{"codes": codes, "finished": true})
	if err != nil {
		panic(err)
	}
	v, err := wire.Unmarshal(b)
	if err != nil {
		panic(err)
	}
	m := v.(map[string]any)
	got, _ := tensor.Values[int64](m["codes"].(*tensor.Tensor))
	fmt.Println(len(b), got, m["finished"])
	// Output: 81 [1 2 3] true
}

func ExampleMap() {
	// Python dicts keep insertion order; Map does too.
	b, _ := wire.Marshal(wire.Map{{Key: "z", Value: 1}, {Key: "a", Value: []any{1, 7, 2}}})
	fmt.Printf("%x\n", b)
	// Output: 82a17a01a16193010702
}

func ExampleUnmarshal() {
	// {"finished": {"__tensor__": true, "dtype": "bool", "shape": [], "data": b"\x01"}, "__tensor__": false}
	b := []byte("\x82\xa8finished\x84\xaa__tensor__\xc3\xa5dtype\xa4bool\xa5shape\x90\xa4data\xc4\x01\x01\xaa__tensor__\xc2")
	v, err := wire.Unmarshal(b)
	if err != nil {
		panic(err)
	}
	m := v.(map[string]any)
	fmt.Println(m["finished"], m["__tensor__"])
	// Output: tensor(bool, shape=[], 1 bytes) false
}

func ExampleReader() {
	// A fixed layout read value by value: ["int64", [2, 3], 16], a tensor
	// frame's descriptor (SPEC §4).
	b := wire.AppendArrayHeader(nil, 3)
	b = wire.AppendString(b, "int64")
	b = wire.AppendInt(wire.AppendInt(wire.AppendArrayHeader(b, 2), 2), 3)
	b = wire.AppendInt(b, 16)

	r := wire.NewReader(b)
	n, _ := r.ArrayLen()
	name, _ := r.Str() // aliases b
	rank, _ := r.ArrayLen()
	var shape []uint64
	for range rank {
		d, _ := r.Uint()
		shape = append(shape, d)
	}
	offset, err := r.Uint()
	fmt.Println(n, string(name), shape, offset, err, r.Len())

	// A value of another type is an error wrapping ErrCorrupt.
	_, err = wire.NewReader(b).Bin()
	fmt.Println(err)
	// Output:
	// 3 int64 [2 3] 16 <nil> 0
	// wire: corrupt msgpack: 0x93 at offset 0 where a bin belongs
}

func ExampleDecode() {
	// What a stage receives: a tree of maps, lists and leaves.
	audio, _ := tensor.FromSlice([]int64{7, 8, 9}, 1, 3)
	b, _ := wire.Marshal(map[string]any{
		"codes":    map[string]any{"audio": audio},
		"hidden":   []float32{0.5, -1}, // a typed slice travels as a float32 tensor
		"finished": tensor.Scalar(true),
		"names":    map[int]string{0: "left", 1: "right"},
	})
	tree, _ := wire.Unmarshal(b)

	var chunk struct {
		Codes struct {
			Audio []int64 `msgpack:"audio"` // any shape, in C order
		} `msgpack:"codes"`
		Hidden   []float32      `msgpack:"hidden"`
		Finished bool           `msgpack:"finished"` // from a 0-d bool tensor
		Names    map[int]string `msgpack:"names"`
	}
	if err := wire.Decode(tree, &chunk); err != nil {
		panic(err)
	}
	fmt.Println(chunk.Codes.Audio, chunk.Hidden, chunk.Finished, chunk.Names[1])

	// A mismatch names where it is.
	var wrong struct {
		Hidden []int64 `msgpack:"hidden"`
	}
	fmt.Println(wire.Decode(tree, &wrong))
	// Output:
	// [7 8 9] [0.5 -1] true right
	// wire: mismatch at .hidden: want int64 tensor, got float32 tensor
}
