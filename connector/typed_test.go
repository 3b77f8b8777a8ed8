//go:build linux

package connector_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/tensor"
)

// step is a typed stage payload: what the issue's producer of hidden
// states and codec chunks sends.
type step struct {
	Hidden   []float32        `msgpack:"hidden"`
	Codes    *tensor.Tensor   `msgpack:"codes"`
	Finished bool             `msgpack:"finished"`
	Names    map[int]string   `msgpack:"names"`
	Meta     map[string]int64 `msgpack:"meta"`
}

// TestRecvAs: on every path a typed payload comes back as the struct, the
// []float32 exactly (it travels as a float32 tensor, not as float64s), and
// a mismatch names its path and wraps ErrMismatch.
func TestRecvAs(t *testing.T) {
	for _, r := range conntest.Rings {
		t.Run(r.Name, func(t *testing.T) {
			sender, receiver := conntest.Edge(t, r.Bytes)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			hidden := []float32{0.1, -1.5, 3e-38}
			codes, _ := tensor.FromSlice([]int64{1, 2, 3, 4}, 2, 2)
			want := step{Hidden: hidden, Codes: codes, Finished: true, Names: map[int]string{3: "c"}, Meta: map[string]int64{"n": 2}}
			conntest.MustPut(t, sender, "0", "1", "typed", want)
			got, size, err := connector.RecvAs[step](ctx, receiver, "0", "typed")
			if err != nil || size == 0 {
				t.Fatalf("RecvAs: size %d, %v", size, err)
			}
			if !slices.Equal(got.Hidden, hidden) || !got.Codes.Equal(codes) || !got.Finished || got.Names[3] != "c" || got.Meta["n"] != 2 {
				t.Fatalf("got %+v", got)
			}

			conntest.MustPut(t, sender, "0", "1", "wrong", map[string]any{"hidden": codes})
			_, _, err = connector.RecvAs[step](ctx, receiver, "0", "wrong")
			const msg = `connector: recv "wrong": wire: mismatch at .hidden: want float32 tensor, got int64 tensor`
			if !errors.Is(err, connector.ErrMismatch) || err.Error() != msg {
				t.Fatalf("err = %v, want %s", err, msg)
			}
		})
	}
}

// A stage receives straight into its own types. (One connector plays both
// stages here: it is stage 1, and puts on edge 0->1 as stage 0 would.)
func ExampleRecvAs() {
	c, err := connector.Open(connector.Options{StageID: "1", WakeupScope: fmt.Sprintf("example-typed-%d", os.Getpid())})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	audio, _ := tensor.FromSlice([]int64{7, 8, 9}, 1, 3)
	payload := map[string]any{
		"audio":    audio,
		"hidden":   []float32{0.5, -1}, // a typed slice travels as a float32 tensor
		"finished": tensor.Scalar(true),
	}
	if _, _, err := c.Put("0", "1", "req-1_0_0", payload); err != nil {
		log.Fatal(err)
	}

	type chunk struct {
		Audio    []int64   `msgpack:"audio"` // any shape, in C order
		Hidden   []float32 `msgpack:"hidden"`
		Finished bool      `msgpack:"finished"` // from a 0-d bool tensor
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, _, err := connector.RecvAs[chunk](ctx, c, "0", "req-1_0_0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Audio, got.Hidden, got.Finished)
	// Output: [7 8 9] [0.5 -1] true
}
