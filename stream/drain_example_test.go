//go:build linux

package stream_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"omnishm/connector"
	"omnishm/stream"
)

// A producing stage that is about to stop drains its sender first: Drain
// returns once a receiver has claimed every chunk sent, so closing the
// connector afterwards retires nothing a reader still needed.
func ExampleSender_Drain() {
	scope := fmt.Sprintf("stream-example-drain-%d", os.Getpid())
	stage0, err := connector.Open(connector.Options{StageID: "0", WakeupScope: scope})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stage0.Close()
	stage1, err := connector.Open(connector.Options{StageID: "1", WakeupScope: scope})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stage1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	sender, err := stream.NewSender(stage0, "0", "1", stream.SenderOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sender.Close()
	for n := range 3 {
		send := sender.Send
		if n == 2 {
			send = sender.Finish
		}
		if err := send(ctx, "req-1", map[string]any{"n": n}); err != nil {
			fmt.Println(err)
			return
		}
	}
	// The consumer, elsewhere in a pipeline, reads the request.
	read := make(chan int)
	go func() {
		reader, err := stream.NewReader(stage1, "0", "1", "req-1", stream.ReaderOptions{})
		if err != nil {
			read <- -1
			return
		}
		defer reader.Close()
		for {
			if _, err := reader.Next(ctx); err != nil { // io.EOF after the finished chunk
				read <- reader.Received()
				return
			}
		}
	}()
	fmt.Println("drain:", sender.Drain(ctx))
	fmt.Println("read:", <-read)
	fmt.Println("reclaimed:", <-sender.Release("req-1"))
	// Output:
	// drain: <nil>
	// read: 3
	// reclaimed: 0
}
