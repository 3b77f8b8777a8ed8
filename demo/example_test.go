package demo_test

import (
	"context"
	"fmt"
	"os"

	"omnishm/demo"
)

func Example() {
	out, err := os.MkdirTemp("", "omnishm-demo-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(out)
	// Three stage processes (this binary again), two requests of four
	// chunks each, one WAV file per request in out.
	res, err := demo.Run(context.Background(), demo.Config{Requests: 2, Chunks: 4, Out: out})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d of %d chunks, %d requests\n", res.Received, res.Requests*res.Chunks, res.Completed)
	// Output: 8 of 8 chunks, 2 requests
}
