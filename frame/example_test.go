package frame_test

import (
	"fmt"

	"omnishm/frame"
	"omnishm/tensor"
	"omnishm/wire"
)

func ExamplePrepare() {
	audio, _ := tensor.FromSlice([]int64{7, 8, 9}, 1, 3)
	payload := map[string]any{"codes": map[string]any{"audio": audio}, "finished": true}

	p, err := frame.Prepare(payload, 1<<20)
	if err != nil {
		panic(err) // ErrTooLarge: send it another way
	}
	buf := make([]byte, p.Size()) // in the transport: ring memory, locked
	if err := p.Write(buf); err != nil {
		panic(err)
	}

	v, err := frame.Decode(buf) // owned by the receiver; buf may be reused
	if err != nil {
		panic(err)
	}
	got := v.(map[string]any)["codes"].(map[string]any)["audio"].(*tensor.Tensor)
	values, _ := tensor.Values[int64](got)
	fmt.Println(p.Tensors(), p.Size(), got.Shape, values)
	// Output: true 120 [1 3] [7 8 9]
}

func ExampleDetect() {
	x, _ := tensor.FromSlice([]float32{0.5, 1.5})
	withTensor, _ := frame.Marshal(map[string]any{"hidden": x})
	plain, _ := frame.Marshal(map[string]any{"ids": []any{1, 2}}) // no tensor: msgpack

	for _, b := range [][]byte{withTensor, plain} {
		var v any
		var err error
		if frame.Detect(b) {
			v, err = frame.Decode(b)
		} else {
			v, err = wire.Unmarshal(b)
		}
		fmt.Println(frame.Detect(b), v, err)
	}
	// Output:
	// true map[hidden:tensor(float32, shape=[2], 8 bytes)] <nil>
	// false map[ids:[1 2]] <nil>
}
