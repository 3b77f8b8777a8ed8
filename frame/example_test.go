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

// A stage that receives same-shaped tensors decodes each message into one
// recycled buffer: no allocation, zeroing or page faults per message.
func ExampleDecodeInto() {
	buf := make([]byte, 4096) // the stage's own, reused for every message
	var arena frame.Arena
	for i := range 3 {
		hidden, _ := tensor.FromSlice([]float32{float32(i), 0.5})
		msg, _ := frame.Marshal(map[string]any{"hidden": hidden}) // in the transport: ring memory

		arena.Reset(buf) // the last message's tensor is overwritten from here on
		v, err := frame.DecodeInto(msg, &arena)
		if err != nil {
			panic(err) // wraps ErrAllocate (with nothing written) if buf is too small
		}
		got := v.(map[string]any)["hidden"].(*tensor.Tensor)
		values, _ := tensor.Values[float32](got)
		fmt.Println(values, &got.Data[0] == &buf[0])
	}
	// Output:
	// [0 0.5] true
	// [1 0.5] true
	// [2 0.5] true
}
