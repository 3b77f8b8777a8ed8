//go:build linux

package demo_test

import (
	"context"
	"fmt"
	"os"

	"omnishm/config"
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

// The same pipeline with its edges over NATS JetStream, through a server
// Run starts in this process and stops at the end. Without Out the WAV
// files go to a new temporary directory, which Run keeps and names in the
// result.
func Example_nats() {
	res, err := demo.Run(context.Background(), demo.Config{Requests: 2, Chunks: 4, Nats: &config.Nats{}})
	if res.Out != "" {
		defer os.RemoveAll(res.Out)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d of %d chunks, %d requests, embedded server: %v\n", res.Received, res.Requests*res.Chunks, res.Completed, res.NatsEmbedded)
	// Output: 8 of 8 chunks, 2 requests, embedded server: true
}
