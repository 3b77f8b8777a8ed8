//go:build linux

package stream

import (
	"context"
	"strconv"
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/tensor"
)

func init() { roles["streamout"] = roleStreamOut }

// unbatched hides a transport's PutMany: its Sender puts chunk by chunk.
type unbatched struct{ connector.Transport }

// roleStreamOut: args scope, ring bytes, request, chunks, size, "batched"
// or "one-by-one": on "go", streams that many chunks of a size-byte tensor
// for the request as stage 0, recycling its payloads, says "sent" and
// waits to be told to exit.
func roleStreamOut(args []string) int {
	conn, ok := openRole("0", args)
	if !ok {
		return 1
	}
	defer conn.Close()
	chunks, _ := strconv.Atoi(args[3])
	size, _ := strconv.Atoi(args[4])
	var t connector.Transport = conn
	if args[5] == "one-by-one" {
		t = unbatched{conn}
	}
	spare := make(chan map[string]any, DefaultQueueLimit)
	s, err := NewSender(t, "0", "1", SenderOptions{Recycle: func(p map[string]any) {
		select {
		case spare <- p:
		default: // more were made than are in flight now
		}
	}})
	if err != nil {
		shmtest.Say("error %v", err)
		return 1
	}
	shmtest.Say("ready")
	shmtest.Hear()
	ctx := context.Background()
	for n := range chunks {
		var p map[string]any
		select {
		case p = <-spare:
		default:
			data, _ := tensor.FromSlice(make([]byte, size), size)
			p = map[string]any{"data": data}
		}
		send := s.Send
		if n == chunks-1 {
			send = s.Finish
		}
		if err := send(ctx, args[2], p); err != nil {
			shmtest.Say("error %v", err)
			return 1
		}
	}
	return closeSaySent(s)
}

// BenchmarkSenderToReader is a stream's rate across processes: a producer
// process's Sender streams b.N chunks of one request, this process's
// Reader takes them; ns/op is per chunk, from the go to the last chunk.
// "one-by-one" is the same Sender without the connector's PutMany, so the
// two tell what putting queued chunks in one pass saves.
func BenchmarkSenderToReader(b *testing.B) {
	for _, size := range []int{512, 4096, 7168} {
		for _, mode := range []string{"batched", "one-by-one"} {
			b.Run(strconv.Itoa(size)+"/"+mode, func(b *testing.B) {
				req := shmtest.Key("rate")
				sc := conntest.CrashScope(b, req)
				recv := conntest.Open(b, sc, "1", ring.DefaultCapacity)
				p := shmtest.Start(b, "streamout", sc, strconv.Itoa(ring.DefaultCapacity), req, strconv.Itoa(b.N), strconv.Itoa(size), mode)
				p.Expect(b, wait, "ready")
				rd, err := NewReader(recv, "0", "1", req, ReaderOptions{})
				if err != nil {
					b.Fatal(err)
				}
				defer rd.Close()
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				b.SetBytes(int64(size))
				b.ResetTimer()
				p.Send(b, "go")
				readToEnd(b, ctx, rd)
				b.StopTimer()
				if rd.Received() != b.N {
					b.Fatalf("%d chunks, want %d", rd.Received(), b.N)
				}
				p.Expect(b, wait, "sent")
				p.Send(b, "exit")
				p.Wait(b, wait)
			})
		}
	}
}
