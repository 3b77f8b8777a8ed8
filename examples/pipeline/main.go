//go:build linux

// Command pipeline is the two-process Go pipeline the README walks
// through: stage 0 streams the int64 codec chunks of a few requests to
// stage 1 over shared memory, and stage 1 checks and sums them. Start the
// two stages in any order, in two shells, with the same scope:
//
//	go run ./examples/pipeline -stage 1 -scope my-pipeline   # the consumer
//	go run ./examples/pipeline -stage 0 -scope my-pipeline   # the producer
//
// The producer exits once the consumer has claimed every chunk; the
// consumer once every request has finished. SIGINT or SIGTERM stop either
// cleanly: the producer retires what it published and was not claimed,
// and both remove their files from /dev/shm.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"omnishm/connector"
	"omnishm/stream"
	"omnishm/tensor"
	"omnishm/wire"
)

// The pipeline's shape: chunks of [1, codesPerChunk] int64 codes.
const codesPerChunk = 28

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the whole program: flags, the signals that stop it, one stage.
// It returns the exit status: 0 done, 1 failed, 2 usage, 130 stopped by a
// signal.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pipeline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stage := fs.Int("stage", -1, "the stage this process is: 0 (producer) or 1 (consumer)")
	scope := fs.String("scope", "", "the wakeup scope both stages share (required: without one, names are keyed by the parent pid)")
	requests := fs.Int("requests", 4, "requests to stream")
	chunks := fs.Int("chunks", 8, "chunks per request")
	wait := fs.Duration("wait", time.Minute, "how long the consumer waits for the producer's next chunk")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *scope == "" || (*stage != 0 && *stage != 1) || *requests < 1 || *chunks < 1 {
		fmt.Fprintln(stderr, "pipeline: want -stage 0|1 and -scope NAME (see -help)")
		return 2
	}
	// Stop on SIGINT and SIGTERM: the stage's context ends, it returns, and
	// its deferred Close calls clean up.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ids := make([]string, *requests)
	for i := range ids {
		ids[i] = fmt.Sprintf("req-%d", i)
	}
	var err error
	if *stage == 0 {
		err = produce(ctx, *scope, ids, *chunks, stdout)
	} else {
		err = consume(ctx, *scope, ids, *wait, stdout)
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "pipeline: stage %d stopped by a signal\n", *stage)
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "pipeline: stage %d: %v\n", *stage, err)
		return 1
	}
	return 0
}

// codes is chunk n of request r: codesPerChunk values the consumer can
// check.
func codes(r, n int) []int64 {
	c := make([]int64, codesPerChunk)
	for i := range c {
		c[i] = int64(r*1_000_000 + n*codesPerChunk + i)
	}
	return c
}

// produce is stage 0: it streams every request's chunks on edge 0->1, then
// waits until stage 1 has claimed them all.
func produce(ctx context.Context, scope string, ids []string, chunks int, out io.Writer) error {
	// A producer receives nothing: no StageID, so no wakeup FIFO. Edges
	// are named by stage ids, ASCII digits, at each Put.
	conn, err := connector.Open(connector.Options{WakeupScope: scope})
	if err != nil {
		return err
	}
	// Closing the connector retires whatever is still unclaimed: it comes
	// last, after the sender has drained.
	defer conn.Close()
	sender, err := stream.NewSender(conn, "0", "1", stream.SenderOptions{})
	if err != nil {
		return err
	}
	defer sender.Close()
	for n := range chunks {
		for r, id := range ids {
			t, err := tensor.FromSlice(codes(r, n), 1, codesPerChunk)
			if err != nil {
				return err
			}
			send := sender.Send
			if n == chunks-1 {
				send = sender.Finish // marks meta.finished: the reader's io.EOF
			}
			// The sender owns the payload until its chunk is put (copied).
			if err := send(ctx, id, map[string]any{"codes": t}); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(out, "stage 0: sending %d chunks of %d requests; waiting for stage 1 to claim them\n", len(ids)*chunks, len(ids))
	// Drain returns once stage 1 has claimed every chunk sent (ctx.Err()
	// on a signal). Release then retires what is left of each request:
	// nothing, after a drain.
	drained := sender.Drain(ctx)
	reclaimed := 0
	for _, id := range ids {
		reclaimed += <-sender.Release(id)
	}
	if drained != nil {
		return drained
	}
	fmt.Fprintf(out, "stage 0: all %d chunks claimed (%d reclaimed)\n", sender.Puts(), reclaimed)
	return sender.Close()
}

// consume is stage 1: it receives every request's chunks on edge 0->1, as
// they arrive, and checks them.
func consume(ctx context.Context, scope string, ids []string, wait time.Duration, out io.Writer) error {
	// A receiver names its stage: Recv and stream readers wait on its
	// wakeup FIFO for what producers put to it.
	conn, err := connector.Open(connector.Options{WakeupScope: scope, StageID: "1"})
	if err != nil {
		return err
	}
	defer conn.Close()
	mux, err := stream.NewMux(conn, "0", "1", stream.MuxOptions{Reader: stream.ReaderOptions{ProgressTimeout: wait}})
	if err != nil {
		return err
	}
	defer mux.Close()
	index := map[string]int{}
	for r, id := range ids {
		index[id] = r
		if err := mux.Add(id); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "stage 1: waiting for %d requests in scope %q\n", len(ids), scope)
	sums := map[string]int64{}
	for done := 0; done < len(ids); {
		chunk, err := mux.Next(ctx) // ctx.Err() on a signal; stream.ErrSenderGone if stage 0 dies
		if err != nil {
			return err
		}
		got, err := chunkCodes(chunk)
		if err != nil {
			return fmt.Errorf("request %s chunk %d: %w", chunk.Request, chunk.N, err)
		}
		want := codes(index[chunk.Request], chunk.N)
		for i := range want {
			if got[i] != want[i] {
				return fmt.Errorf("request %s chunk %d: code %d is %d, want %d", chunk.Request, chunk.N, i, got[i], want[i])
			}
			sums[chunk.Request] += got[i]
		}
		if chunk.Last {
			done++
			fmt.Fprintf(out, "stage 1: %s: %d chunks, sum %d\n", chunk.Request, chunk.N+1, sums[chunk.Request])
		}
	}
	return nil
}

// chunkCodes reads a chunk's codes into a typed struct: the [1, 28] int64
// tensor's values arrive as a []int64 of the receiver's own memory (nothing
// aliases shared memory); a payload of another shape is an error wrapping
// wire.ErrMismatch that names the path (connector.RecvAs does the same for
// one Recv).
func chunkCodes(c stream.Chunk) ([]int64, error) {
	var v struct {
		Codes []int64 `msgpack:"codes"`
	}
	if err := wire.Decode(c.Payload, &v); err != nil {
		return nil, err
	}
	if len(v.Codes) != codesPerChunk {
		return nil, fmt.Errorf("%d codes, want %d", len(v.Codes), codesPerChunk)
	}
	return v.Codes, nil
}
