package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/shmtest"
	"omnishm/tensor"
)

// transports are the two ways a Reader waits: blocking Recv, or polling.
var transports = []struct {
	name string
	wrap func(*memTransport) connector.Transport
}{
	{"recv", func(m *memTransport) connector.Transport { return m }},
	{"poll", func(m *memTransport) connector.Transport { return pollOnly{m} }},
}

func codes(request, n int) *tensor.Tensor {
	v := make([]int64, 28)
	for i := range v {
		v[i] = int64(request*1000 + n*28 + i)
	}
	t, _ := tensor.FromSlice(v, 1, 28)
	return t
}

func mustSender(t *testing.T, tr connector.Transport, opts SenderOptions) *Sender {
	t.Helper()
	s, err := NewSender(tr, "0", "1", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustReader(t *testing.T, tr connector.Transport, request string, opts ReaderOptions) *Reader {
	t.Helper()
	r, err := NewReader(tr, "0", "1", request, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestKeyAndPrefix(t *testing.T) {
	if got := Key("req-1", "0", 12); got != "req-1_0_12" {
		t.Fatalf("Key = %q", got)
	}
	if got := Prefix("req-1", "0"); got != "req-1_0_" {
		t.Fatalf("Prefix = %q", got)
	}
}

func TestChunkShape(t *testing.T) {
	user := map[string]any{
		"codes": map[string]any{"audio": codes(0, 0)},
		"meta":  map[string]any{"left_context_size": 3},
	}
	for _, finished := range []bool{false, true} {
		c, err := newChunk(user, finished)
		if err != nil {
			t.Fatal(err)
		}
		meta := c["meta"].(map[string]any)
		f := meta["finished"].(*tensor.Tensor)
		if f.DType != tensor.Bool || len(f.Shape) != 0 || len(f.Data) != 1 {
			t.Fatalf("finished is %v, want a 0-d bool tensor", f)
		}
		if Finished(c) != finished || meta["left_context_size"] != 3 {
			t.Fatalf("chunk %v: finished %v, want %v", c, Finished(c), finished)
		}
		if c["codes"].(map[string]any)["audio"] != user["codes"].(map[string]any)["audio"] {
			t.Fatal("user field not carried")
		}
	}
	if _, ok := user["meta"].(map[string]any)["finished"]; ok {
		t.Fatal("the caller's meta map was modified")
	}
	if _, err := newChunk(map[string]any{"meta": 7}, false); !errors.Is(err, ErrBadChunk) {
		t.Fatalf("non-map meta: %v", err)
	}
}

func TestFinished(t *testing.T) {
	one, _ := tensor.FromSlice([]bool{true}, 1)
	i8 := tensor.Scalar[int8](1)
	for _, c := range []struct {
		name string
		meta any
		want bool
	}{
		{"tensor true", map[string]any{"finished": tensor.Scalar(true)}, true},
		{"tensor false", map[string]any{"finished": tensor.Scalar(false)}, false},
		{"tensor value", map[string]any{"finished": *tensor.Scalar(true)}, true},
		{"one-element tensor", map[string]any{"finished": one}, true},
		{"int8 tensor", map[string]any{"finished": i8}, false},
		{"bool", map[string]any{"finished": true}, true},
		{"any-keyed map", map[any]any{"finished": true}, true},
		{"missing", map[string]any{}, false},
		{"no meta", nil, false},
		{"meta not a map", "x", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Finished(map[string]any{"meta": c.meta}); got != c.want {
				t.Fatalf("Finished = %v, want %v", got, c.want)
			}
		})
	}
}

func TestBadNames(t *testing.T) {
	m := newMem()
	if _, err := NewSender(m, "", "1", SenderOptions{}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty from: %v", err)
	}
	s := mustSender(t, m, SenderOptions{})
	for _, req := range []string{"", "a/b", "a\x00b"} {
		if err := s.Send(context.Background(), req, nil); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("request %q: %v", req, err)
		}
		if _, err := NewReader(m, "0", "1", req, ReaderOptions{}); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("reader of %q: %v", req, err)
		}
	}
}

// TestInterleavedInOrder: many requests sent interleaved arrive, each in
// order with its finish mark, whichever way the reader waits.
func TestInterleavedInOrder(t *testing.T) {
	const requests, chunks = 6, 20
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			m := newMem()
			tr := tc.wrap(m)
			s := mustSender(t, tr, SenderOptions{QueueLimit: 4})
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make(chan error, requests)
			for r := range requests {
				rd := mustReader(t, tr, fmt.Sprintf("req-%d", r), ReaderOptions{})
				wg.Go(func() { errs <- readAll(ctx, rd, r, chunks) })
			}
			for n := range chunks {
				for r := range requests {
					p := map[string]any{"codes": map[string]any{"audio": codes(r, n)}}
					send := s.Send
					if n == chunks-1 {
						send = s.Finish
					}
					if err := send(ctx, fmt.Sprintf("req-%d", r), p); err != nil {
						t.Fatal(err)
					}
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s.Puts() != requests*chunks {
				t.Fatalf("puts = %d", s.Puts())
			}
		})
	}
}

// readAll reads a request's stream and checks every chunk's content and mark.
func readAll(ctx context.Context, rd *Reader, r, chunks int) error {
	for n := 0; ; n++ {
		c, err := rd.Next(ctx)
		if err == io.EOF {
			if n != chunks {
				return fmt.Errorf("request %d: EOF after %d chunks", r, n)
			}
			if _, err := rd.Next(ctx); err != io.EOF {
				return fmt.Errorf("request %d: Next after EOF: %v", r, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("request %d chunk %d: %w", r, n, err)
		}
		audio, _ := asMap(c["codes"])
		got, _ := audio["audio"].(*tensor.Tensor)
		if !got.Equal(codes(r, n)) {
			return fmt.Errorf("request %d chunk %d: codes %v", r, n, got)
		}
		if Finished(c) != (n == chunks-1) {
			return fmt.Errorf("request %d chunk %d: finished %v", r, n, Finished(c))
		}
	}
}

// TestReleaseReclaimsUndrained mirrors the seed's
// test_shm_release_reclaims_undrained_chunks_after_finish: three chunks,
// the receiver drains one, release reclaims exactly the other two, and a
// sibling whose id shares the prefix keeps its chunk.
func TestReleaseReclaimsUndrained(t *testing.T) {
	m := newMem()
	s := mustSender(t, m, SenderOptions{})
	ctx := context.Background()
	const req, sibling = "req-1", "req-10"
	for n := range 3 {
		send := s.Send
		if n == 2 {
			send = s.Finish
		}
		if err := send(ctx, req, map[string]any{"n": n}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Send(ctx, sibling, map[string]any{"who": "sibling"}); err != nil {
		t.Fatal(err)
	}
	c, err := mustReader(t, m, req, ReaderOptions{}).Next(ctx)
	if err != nil || c["n"] != 0 {
		t.Fatalf("first chunk %v, %v", c, err)
	}
	if got := <-s.Release(req); got != 2 {
		t.Fatalf("release reclaimed %d, want 2", got)
	}
	if s.Reclaimed() != 2 {
		t.Fatalf("Reclaimed = %d", s.Reclaimed())
	}
	for _, k := range []string{"req-1_0_1", "req-1_0_2"} {
		if m.has(k) {
			t.Fatalf("%s not reclaimed", k)
		}
	}
	p, _, ok, _ := m.Get("0", "1", "req-10_0_0", nil)
	if !ok || p.(map[string]any)["who"] != "sibling" {
		t.Fatalf("sibling chunk: %v %v", p, ok)
	}
	// Released: the id may start a new stream.
	if err := s.Send(ctx, req, nil); err != nil {
		t.Fatalf("send after release: %v", err)
	}
}

// TestReleaseQueuedBehindSends: nothing is retired before the sends
// enqueued ahead of the release have run.
func TestReleaseQueuedBehindSends(t *testing.T) {
	m := newMem()
	g := newGated(m)
	s := mustSender(t, g, SenderOptions{})
	ctx := context.Background()
	for n := range 3 {
		if err := s.Send(ctx, "req-1", map[string]any{"n": n}); err != nil {
			t.Fatal(err)
		}
	}
	released := s.Release("req-1")
	if k := <-g.started; k != "req-1_0_0" {
		t.Fatalf("first put %s", k)
	}
	// The worker is inside the first Put: the release has not run.
	select {
	case n := <-released:
		t.Fatalf("release ran before the sends: %d", n)
	default:
	}
	if s.Reclaimed() != 0 || slices.Contains(m.log(), "cleanup_prefix req-1_0_") {
		t.Fatalf("cleanup before the sends ran: %v", m.log())
	}
	for range 3 {
		g.gate <- struct{}{}
	}
	if n := <-released; n != 3 {
		t.Fatalf("reclaimed %d, want the 3 undrained chunks", n)
	}
	want := []string{"put req-1_0_0", "put req-1_0_1", "put req-1_0_2", "cleanup_prefix req-1_0_"}
	if got := m.log(); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}

func TestFinishThenSendFails(t *testing.T) {
	s := mustSender(t, newMem(), SenderOptions{})
	ctx := context.Background()
	if err := s.Finish(ctx, "r", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, "r", nil); !errors.Is(err, ErrFinished) {
		t.Fatalf("send after finish: %v", err)
	}
}

// TestBoundedQueue: a full queue blocks Send (until room, ctx or Close) or
// fails it, by option; it never grows past the limit.
func TestBoundedQueue(t *testing.T) {
	const limit = 3
	fill := func(t *testing.T, opts SenderOptions) (*Sender, *gatedTransport, *memTransport) {
		m := newMem()
		g := newGated(m)
		opts.QueueLimit = limit
		s := mustSender(t, g, opts)
		for n := range limit {
			if err := s.Send(context.Background(), "r", map[string]any{"n": n}); err != nil {
				t.Fatal(err)
			}
		}
		<-g.started // chunk 0 is being put and still holds its slot
		t.Cleanup(func() { close(g.gate) })
		return s, g, m
	}
	t.Run("fail", func(t *testing.T) {
		s, g, _ := fill(t, SenderOptions{FailWhenFull: true})
		if err := s.Send(context.Background(), "r", nil); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("send on full queue: %v", err)
		}
		g.gate <- struct{}{} // chunk 0 put: one slot frees
		shmtest.Eventually(t, 10*time.Second, "a free slot", func() bool {
			return s.Send(context.Background(), "r", map[string]any{"n": limit}) == nil
		})
	})
	t.Run("block until ctx", func(t *testing.T) {
		s, _, _ := fill(t, SenderOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Send(ctx, "r", nil) }()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("blocked send: %v", err)
		}
	})
	t.Run("block until room", func(t *testing.T) {
		s, g, m := fill(t, SenderOptions{})
		done := make(chan error, 1)
		go func() { done <- s.Send(context.Background(), "r", map[string]any{"n": limit}) }()
		g.gate <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for range limit {
			<-g.started
			g.gate <- struct{}{}
		}
		rd := mustReader(t, m, "r", ReaderOptions{})
		for n := range limit + 1 {
			c, err := rd.Next(context.Background())
			if err != nil || c["n"] != n {
				t.Fatalf("chunk %d: %v %v", n, c, err)
			}
		}
	})
	t.Run("block until close", func(t *testing.T) {
		s, g, _ := fill(t, SenderOptions{AbortOnClose: true})
		done := make(chan error, 1)
		go func() { done <- s.Send(context.Background(), "r", nil) }()
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked send after close: %v", err)
		}
		g.gate <- struct{}{}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
	})
}

// TestCloseModes: Close puts what is queued, or drops it with AbortOnClose.
func TestCloseModes(t *testing.T) {
	for _, c := range []struct {
		abort bool
		puts  int
	}{{false, 4}, {true, 1}} {
		t.Run(fmt.Sprintf("abort=%v", c.abort), func(t *testing.T) {
			m := newMem()
			g := newGated(m)
			s := mustSender(t, g, SenderOptions{AbortOnClose: c.abort})
			for range 4 {
				if err := s.Send(context.Background(), "r", nil); err != nil {
					t.Fatal(err)
				}
			}
			released := s.Release("r")
			<-g.started
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			// Let chunk 0 through only once Close has decided what to do
			// with the rest.
			shmtest.Eventually(t, 10*time.Second, "close to begin", func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.closed
			})
			go func() {
				for range c.puts {
					g.gate <- struct{}{}
				}
			}()
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
			if s.Puts() != c.puts || int(s.dropped.Load()) != 4-c.puts {
				t.Fatalf("puts %d dropped %d", s.Puts(), s.dropped.Load())
			}
			if n := <-released; n != c.puts {
				t.Fatalf("release after close reclaimed %d, want %d", n, c.puts)
			}
			if err := s.Send(context.Background(), "r2", nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("send after close: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("second close: %v", err)
			}
		})
	}
}

func TestPutErrorReported(t *testing.T) {
	m := newMem()
	m.putErr = errBoom
	s := mustSender(t, m, SenderOptions{})
	if err := s.Send(context.Background(), "r", nil); err != nil {
		t.Fatal(err)
	}
	shmtest.Eventually(t, 10*time.Second, "the put error", func() bool { return s.Err() != nil })
	if !errors.Is(s.Err(), errBoom) {
		t.Fatalf("Err = %v", s.Err())
	}
	if err := s.Send(context.Background(), "r", nil); !errors.Is(err, errBoom) {
		t.Fatalf("next send: %v", err)
	}
	if err := s.Close(); !errors.Is(err, errBoom) {
		t.Fatalf("close: %v", err)
	}
}

// TestReaderSenderGone: a reader gives up when the liveness check fails or
// when no chunk comes within the progress timeout, and still delivers a
// chunk that was put before the sender died.
func TestReaderSenderGone(t *testing.T) {
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			m := newMem()
			tr := tc.wrap(m)
			ctx := context.Background()
			alive := true
			var mu sync.Mutex
			rd := mustReader(t, tr, "r", ReaderOptions{
				CheckInterval: time.Millisecond,
				SenderAlive:   func() bool { mu.Lock(); defer mu.Unlock(); return alive },
			})
			m.Put("0", "1", Key("r", "0", 0), map[string]any{})
			mu.Lock()
			alive = false
			mu.Unlock()
			if _, err := rd.Next(ctx); err != nil {
				t.Fatalf("chunk put before death: %v", err)
			}
			if _, err := rd.Next(ctx); !errors.Is(err, ErrSenderGone) {
				t.Fatalf("dead sender: %v", err)
			}
			quiet := mustReader(t, tr, "q", ReaderOptions{ProgressTimeout: 20 * time.Millisecond})
			if _, err := quiet.Next(ctx); !errors.Is(err, ErrSenderGone) {
				t.Fatalf("silent sender: %v", err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := quiet.Next(cctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled: %v", err)
			}
		})
	}
}

func TestReaderBadChunk(t *testing.T) {
	m := newMem()
	m.Put("0", "1", Key("r", "0", 0), []byte("x"))
	if _, err := mustReader(t, m, "r", ReaderOptions{}).Next(context.Background()); !errors.Is(err, ErrBadChunk) {
		t.Fatalf("non-map chunk: %v", err)
	}
}
