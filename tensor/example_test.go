package tensor_test

import (
	"fmt"

	"omnishm/tensor"
)

func Example() {
	// FromSlice wraps a Go slice without copying; the bytes are the wire's.
	t, err := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.DType, t.Shape, t.Len(), len(t.Data))

	// Bytes from a decoder are checked with New before use.
	u, err := tensor.New(tensor.Int16, []int{3}, []byte{1, 0, 2, 0})
	fmt.Println(u, err)

	// Half-precision elements convert with ties to even.
	h := []tensor.Half{tensor.HalfFrom(1), tensor.HalfFrom(65504), tensor.HalfFrom(0.1)}
	fmt.Printf("%#04x %#04x %v\n", uint16(h[0]), uint16(h[1]), h[2].Float32())
	// Output:
	// float32 [2 3] 6 24
	// <nil> tensor: shape does not match data: shape [3] needs 6 bytes, have 4
	// 0x3c00 0x7bff 0.099975586
}

func ExampleValues() {
	t := tensor.Scalar(int64(42))
	v, _ := tensor.Values[int64](t)
	fmt.Println(len(t.Shape), v)
	// Output: 0 [42]
}

func ExampleNewLeaf() {
	// A decoder hands over the three fields it read; NewLeaf checks them.
	for _, k := range []tensor.Kind{tensor.KindTensor, tensor.KindArray, tensor.KindImage} {
		name := map[tensor.Kind]string{tensor.KindTensor: "uint8", tensor.KindArray: "|u1", tensor.KindImage: "L"}[k]
		leaf, err := tensor.NewLeaf(k, name, []int{1, 2}, []byte{7, 9})
		fmt.Printf("%s %s=%s: %T %v\n", k, k.NameField(), name, leaf, err)
	}
	_, err := tensor.NewLeaf(tensor.KindImage, "L", []int{2, 2}, []byte{7, 9})
	fmt.Println(err)
	// Output:
	// tensor dtype=uint8: *tensor.Tensor <nil>
	// ndarray dtype=|u1: *tensor.Array <nil>
	// image mode=L: *tensor.Image <nil>
	// tensor: shape does not match data: shape [2 2] needs 4 bytes, have 2
}
