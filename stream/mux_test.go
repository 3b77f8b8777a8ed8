//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/tensor"
)

func mustMux(t *testing.T, tr connector.Receiver, opts MuxOptions) *Mux {
	t.Helper()
	m, err := NewMux(tr, "0", "1", opts)
	return closedAtEnd(t, m, err)
}

// checkChunk checks a chunk's codes and finish mark: chunk n of request r
// of a stream of chunks.
func checkChunk(c Chunk, r, chunks int) error {
	audio, _ := asMap(c.Payload["codes"])
	got, _ := audio["audio"].(*tensor.Tensor)
	if !got.Equal(codes(r, c.N)) {
		return fmt.Errorf("request %s chunk %d: codes %v", c.Request, c.N, got)
	}
	if c.Last != (c.N == chunks-1) || Finished(c.Payload) != c.Last {
		return fmt.Errorf("request %s chunk %d: last %v", c.Request, c.N, c.Last)
	}
	return nil
}

// A producer process interleaves the chunks of 500 requests; one Mux
// yields every chunk once, in order within each request.
func TestMuxManyInterleavedRequests(t *testing.T) {
	const requests, chunks = 500, 4
	conntest.EachRing(t, func(t *testing.T, sc string, ringBytes int) {
		recv := conntest.Open(t, sc, "1", ringBytes)
		m := mustMux(t, recv, MuxOptions{Buffer: 2})
		ids := make([]string, requests)
		index := map[string]int{}
		for r := range ids {
			ids[r] = shmtest.Key("mux")
			index[ids[r]] = r
			if err := m.Add(ids[r]); err != nil {
				t.Fatal(err)
			}
		}
		p := shmtest.Start(t, "produce", append([]string{sc, strconv.Itoa(ringBytes), strconv.Itoa(chunks)}, ids...)...)
		ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
		defer cancel()
		next := make([]int, requests)
		for range requests * chunks {
			c, err := m.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r, ok := index[c.Request]
			if !ok || c.N != next[r] {
				t.Fatalf("request %s: chunk %d, want %d", c.Request, c.N, next[r])
			}
			next[r]++
			if err := checkChunk(c, r, chunks); err != nil {
				t.Fatal(err)
			}
		}
		for r, n := range next {
			if n != chunks {
				t.Fatalf("request %d: %d chunks", r, n)
			}
		}
		releaseDrained(t, p)
		if h := recv.Health(); h.Gets != requests*chunks {
			t.Fatalf("health %+v: want %d gets", h, requests*chunks)
		}
		short, stop := context.WithCancel(ctx)
		stop()
		if _, err := m.Next(short); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next with every request done: %v", err)
		}
	})
}

// A consumer that stops reading: the Mux claims Buffer chunks of the
// request and no more, the rest stay published, and reading resumes in
// order.
func TestMuxBackpressure(t *testing.T) {
	const buffer, chunks = 3, 20
	for _, rc := range conntest.Rings {
		t.Run(rc.Name, func(t *testing.T) {
			send, recv := conntest.Edge(t, rc.Bytes)
			s := mustSender(t, send, SenderOptions{QueueLimit: chunks})
			m := mustMux(t, recv, MuxOptions{Buffer: buffer})
			req := shmtest.Key("slow")
			if err := m.Add(req); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			for n := range chunks {
				send := s.Send
				if n == chunks-1 {
					send = s.Finish
				}
				if err := send(ctx, req, map[string]any{"codes": map[string]any{"audio": codes(0, n)}}); err != nil {
					t.Fatal(err)
				}
			}
			shmtest.Eventually(t, wait, "the sender to put every chunk", func() bool { return s.Puts() == chunks })
			shmtest.Eventually(t, wait, "the mux to fill its buffer", func() bool { return m.Buffered(req) == buffer })
			// The request's reader waits for room: nothing more is claimed.
			if got := recv.Health().Gets; got != buffer || recv.Waiting() != 0 {
				t.Fatalf("%d chunks claimed and %d waiting with a buffer of %d", got, recv.Waiting(), buffer)
			}
			for n := range chunks {
				c, err := m.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if c.Request != req || c.N != n {
					t.Fatalf("got %s chunk %d, want chunk %d", c.Request, c.N, n)
				}
				if err := checkChunk(c, 0, chunks); err != nil {
					t.Fatal(err)
				}
				if b := m.Buffered(req); b > buffer {
					t.Fatalf("%d chunks buffered", b)
				}
			}
			<-s.Release(req)
		})
	}
}

// Add refuses what it cannot receive; Remove drops a request; Close ends
// Next.
func TestMuxAddRemoveClose(t *testing.T) {
	send, recv := conntest.Edge(t, ring.DefaultCapacity)
	m := mustMux(t, recv, MuxOptions{})
	a, b := shmtest.Key("a"), shmtest.Key("b")
	for _, req := range []string{a, b} {
		if err := m.Add(req); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Add(a); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("Add twice: %v", err)
	}
	if err := m.Add("bad/id"); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("Add of a bad id: %v", err)
	}
	conntest.MustPut(t, send, "0", "1", Key(a, "0", 0), map[string]any{"x": int64(1)})
	shmtest.Eventually(t, wait, "a's chunk to arrive", func() bool { return m.Buffered(a) == 1 })
	m.Remove(a)
	conntest.MustPut(t, send, "0", "1", Key(b, "0", 0), map[string]any{"x": int64(2)})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := m.Next(ctx)
	if err != nil || c.Request != b || c.N != 0 || c.Last {
		t.Fatalf("after removing a: %+v %v", c, err)
	}
	if _, err := NewMux(recv, "0", "2", MuxOptions{}); !errors.Is(err, connector.ErrBadStage) {
		t.Fatalf("mux of another stage's edge: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Next(ctx); !errors.Is(err, ErrMuxClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if err := m.Add(shmtest.Key("late")); !errors.Is(err, ErrMuxClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	if recv.Waiting() != 0 {
		t.Fatalf("%d Recv calls still waiting after Close", recv.Waiting())
	}
}
