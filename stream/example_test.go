//go:build linux

package stream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"omnishm/connector"
	"omnishm/frame"
	"omnishm/proc"
	"omnishm/stream"
	"omnishm/tensor"
)

// Stage 0 streams three chunks of codec codes for request "req-1" to stage
// 1, which reads them in order until the finished chunk. Here both stages
// live in one process; in a pipeline each opens its own connector with the
// same wakeup scope.
func Example() {
	scope := fmt.Sprintf("stream-example-%d", os.Getpid())
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

	ctx := context.Background()
	sender, err := stream.NewSender(stage0, "0", "1", stream.SenderOptions{QueueLimit: 16})
	if err != nil {
		fmt.Println(err)
		return
	}
	for n := range 3 {
		codes := make([]int64, 28)
		for i := range codes {
			codes[i] = int64(100*n + i)
		}
		audio, _ := tensor.FromSlice(codes, 1, 28)
		send := sender.Send
		if n == 2 {
			send = sender.Finish // meta.finished = true
		}
		if err := send(ctx, "req-1", map[string]any{"codes": map[string]any{"audio": audio}}); err != nil {
			fmt.Println(err)
			return
		}
	}

	// The producer's identity lets the reader stop as soon as it exits; in
	// a pipeline the producer passes its proc.Self() to the consumer.
	producer, err := proc.Self()
	if err != nil {
		fmt.Println(err)
		return
	}
	reader, err := stream.NewReader(stage1, "0", "1", "req-1", stream.ReaderOptions{Sender: producer})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reader.Close()
	for {
		chunk, err := reader.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		audio := chunk["codes"].(map[string]any)["audio"].(*tensor.Tensor)
		codes, _ := tensor.Values[int64](audio)
		fmt.Printf("chunk %d: shape %v first code %d finished %v\n", reader.Received()-1, audio.Shape, codes[0], stream.Finished(chunk))
	}
	// Everything was drained: the release reclaims nothing.
	fmt.Println("reclaimed:", <-sender.Release("req-1"))
	if err := sender.Close(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// chunk 0: shape [1 28] first code 0 finished false
	// chunk 1: shape [1 28] first code 100 finished false
	// chunk 2: shape [1 28] first code 200 finished true
	// reclaimed: 0
}

// A stage that reads a stream of same-shaped tensors decodes each chunk
// into one recycled buffer: NextInto writes the chunk's tensor there, and
// the chunk refers to it until the next NextInto reuses it. (One connector
// both sends, as stage 0, and receives, as stage 1, to keep it short.)
func ExampleReader_NextInto() {
	conn := openStage("1", fmt.Sprintf("stream-into-example-%d", os.Getpid()))
	defer conn.Close()
	ctx := context.Background()
	sender, err := sendChunks(ctx, conn, []string{"req-1"}, 2, func(_ string, n int) map[string]any {
		hidden, _ := tensor.FromSlice(make([]float32, 4096), 4096)
		hidden.Data[0] = byte(n)
		return map[string]any{"hidden": hidden}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sender.Close()
	reader, err := stream.NewReader(conn, "0", "1", "req-1", stream.ReaderOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reader.Close()
	buf := make([]byte, 64<<10) // room for one chunk's tensor, aligned
	var arena frame.Arena
	for {
		arena.Reset(buf)
		chunk, err := reader.NextInto(ctx, &arena)
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		hidden := chunk["hidden"].(*tensor.Tensor)
		fmt.Printf("chunk %d: %d bytes, first byte %d, %d bytes of buf used\n", reader.Received()-1, len(hidden.Data), hidden.Data[0], arena.Used())
	}
	// buf holds the tensor and the stream's one-byte finished flag.

	// Output:
	// chunk 0: 16384 bytes, first byte 0, 16385 bytes of buf used
	// chunk 1: 16384 bytes, first byte 1, 16385 bytes of buf used
}

// A reader gives up on a request whose producer stopped sending: here
// nothing is ever sent, and the progress timeout is short.
func ExampleReader_Next_senderGone() {
	stage1 := openStage("1", fmt.Sprintf("stream-example-gone-%d", os.Getpid()))
	defer stage1.Close()
	reader, err := stream.NewReader(stage1, "0", "1", "req-2", stream.ReaderOptions{ProgressTimeout: 10 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reader.Close()
	_, err = reader.Next(context.Background())
	fmt.Println(errors.Is(err, stream.ErrSenderGone))
	fmt.Println(err)
	// Output:
	// true
	// stream: sender gone: request "req-2" chunk 0: no chunk within 10ms; no chunk received yet, its producer unknown (no ReaderOptions.Sender, and no chunk came through a ring)
}

// A stage that consumes every request of an edge reads them through one
// Mux: it is told the request ids, and yields each chunk as it arrives, in
// order within its request.
func ExampleMux() {
	stage0, stage1 := openStages(fmt.Sprintf("stream-example-mux-%d", os.Getpid()))
	defer stage0.Close()
	defer stage1.Close()

	mux, err := stream.NewMux(stage1, "0", "1", stream.MuxOptions{Buffer: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mux.Close()
	requests := []string{"req-a", "req-b"}
	for _, r := range requests {
		if err := mux.Add(r); err != nil {
			fmt.Println(err)
			return
		}
	}

	ctx := context.Background()
	sender, err := sendChunks(ctx, stage0, requests, 2, func(r string, n int) map[string]any {
		return map[string]any{"text": fmt.Sprintf("%s/%d", r, n)}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sender.Close()

	next := map[string]int{}
	for range 4 {
		c, err := mux.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		if c.N != next[c.Request] || c.Payload["text"] != fmt.Sprintf("%s/%d", c.Request, c.N) {
			fmt.Println("out of order:", c.Request, c.N)
		}
		next[c.Request]++
		if c.Last {
			fmt.Println(c.Request, "done after", next[c.Request], "chunks")
		}
	}
	// Unordered output:
	// req-a done after 2 chunks
	// req-b done after 2 chunks
}

// A producing stage that is about to stop drains its sender first: Drain
// returns once a receiver has claimed every chunk sent, so closing the
// connector afterwards retires nothing a reader still needed.
func ExampleSender_Drain() {
	stage0, stage1 := openStages(fmt.Sprintf("stream-example-drain-%d", os.Getpid()))
	defer stage0.Close()
	defer stage1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	sender, err := sendChunks(ctx, stage0, []string{"req-1"}, 3, func(_ string, n int) map[string]any {
		return map[string]any{"n": n}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sender.Close()
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

// sendChunks opens a sender on conn's edge 0->1 and sends chunks chunks
// of each of requests, interleaved, the last of each with Finish, as
// Example does; chunk(r, n) is chunk n of request r. The caller closes the
// sender.
func sendChunks(ctx context.Context, conn *connector.SHM, requests []string, chunks int, chunk func(r string, n int) map[string]any) (*stream.Sender, error) {
	sender, err := stream.NewSender(conn, "0", "1", stream.SenderOptions{})
	if err != nil {
		return nil, err
	}
	for n := range chunks {
		for _, r := range requests {
			send := sender.Send
			if n == chunks-1 {
				send = sender.Finish
			}
			if err := send(ctx, r, chunk(r, n)); err != nil {
				sender.Close()
				return nil, err
			}
		}
	}
	return sender, nil
}

// openStage opens stage id of a deployment scope, as Example does.
func openStage(id connector.Stage, scope string) *connector.SHM {
	c, err := connector.Open(connector.Options{StageID: id, WakeupScope: scope})
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// openStages opens stages 0 and 1 of one deployment scope.
func openStages(scope string) (stage0, stage1 *connector.SHM) {
	stage0 = openStage("0", scope)
	stage1, err := connector.Open(connector.Options{StageID: "1", WakeupScope: scope})
	if err != nil {
		stage0.Close()
		log.Fatal(err)
	}
	return stage0, stage1
}
