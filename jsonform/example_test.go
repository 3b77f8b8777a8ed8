package jsonform_test

import (
	"fmt"
	"math"

	"omnishm/jsonform"
	"omnishm/tensor"
)

func ExampleMarshal() {
	t, _ := tensor.FromSlice([]float32{1, 2, 3, 4}, 2, 2)
	payload := map[string]any{
		"codes":  t,
		"ids":    []any{int64(7), uint64(math.MaxUint64)},
		"scores": []any{1.0, 1e-5, math.NaN()},
		"raw":    []byte("hi"),
	}
	b, err := jsonform.Marshal(payload)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
	// Output:
	// {"codes":{"$tensor":{"data":"AACAPwAAAEAAAEBAAACAQA==","dtype":"float32","shape":[2,2]}},"ids":[7,18446744073709551615],"raw":{"$bytes":"aGk="},"scores":[1.0,1e-05,"NaN"]}
}

func ExampleUnmarshal() {
	v, err := jsonform.Unmarshal([]byte(`{"x": {"$tensor": {"dtype": "int16", "shape": [3], "data": "AQACAAMA"}}, "n": 1e16}`))
	if err != nil {
		panic(err)
	}
	m := v.(map[string]any)
	x := m["x"].(*tensor.Tensor)
	vals, _ := tensor.Values[int16](x)
	fmt.Println(x.DType, x.Shape, vals)
	fmt.Printf("%T %v\n", m["n"], m["n"])
	// Output:
	// int16 [3] [1 2 3]
	// float64 1e+16
}
