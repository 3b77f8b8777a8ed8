//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
)

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

// TestRecycle: SenderOptions.Recycle hands back every payload enqueued,
// once and in order, the very map the caller sent, after its chunk was
// put, or when a put error dropped it.
func TestRecycle(t *testing.T) {
	for _, putErr := range []error{nil, errBoom} {
		t.Run(fmt.Sprint(putErr), func(t *testing.T) {
			m := newMem()
			m.putErr = putErr
			var got []int
			s := mustSender(t, m, SenderOptions{Recycle: func(payload map[string]any) {
				n := payload["n"].(int)
				if putErr == nil && !slices.Contains(m.log(), "put "+Key("r", "0", n)) {
					t.Errorf("chunk %d handed back before its put", n)
				}
				payload["back"] = true // the caller's again
				got = append(got, n)
			}})
			var sent []map[string]any
			for n := range 5 {
				payload := map[string]any{"n": n}
				// After a put error Send refuses: what it refused is not the Sender's.
				if err := s.Send(context.Background(), "r", payload); err != nil {
					if !errors.Is(err, errBoom) {
						t.Fatal(err)
					}
					break
				}
				sent = append(sent, payload)
			}
			s.Close() // the worker has handed everything back once it returns
			if len(got) != len(sent) || len(sent) == 0 {
				t.Fatalf("handed back %v of %d", got, len(sent))
			}
			for n, p := range sent {
				if got[n] != n || p["back"] != true {
					t.Fatalf("handed back %v: chunk %d not its own payload", got, n)
				}
			}
		})
	}
}

// TestRecycleReusesChunkMaps: with Recycle set the Sender reuses its chunk
// maps, and a chunk put from a reused one carries its own payload's fields
// only (it fails when a reused map keeps an earlier chunk's fields or
// finish mark). A queue of one makes every chunk after the first reuse one.
func TestRecycleReusesChunkMaps(t *testing.T) {
	conntest.EachRing(t, func(t *testing.T, sc string, ringBytes int) {
		prod, recv := conntest.Open(t, sc, "0", ringBytes), conntest.Open(t, sc, "1", ringBytes)
		s := mustSender(t, prod, SenderOptions{QueueLimit: 1, Recycle: func(map[string]any) {}})
		req := shmtest.Key("reuse")
		const chunks = 6
		ctx := context.Background()
		for n := range chunks {
			payload := map[string]any{"n": n}
			if n%3 == 0 {
				payload["extra"] = "x"
			}
			if n%2 == 1 {
				payload["meta"] = map[string]any{"who": n}
			}
			send := s.Send
			if n == chunks-1 {
				send = s.Finish
			}
			if err := send(ctx, req, payload); err != nil {
				t.Fatal(err)
			}
		}
		rd := mustReader(t, recv, req, ReaderOptions{})
		for n := range chunks {
			chunk, err := rd.Next(ctx)
			if err != nil {
				t.Fatalf("chunk %d: %v", n, err)
			}
			meta, _ := chunk["meta"].(map[string]any)
			_, extra := chunk["extra"]
			_, who := meta["who"]
			if chunk["n"] != int64(n) || extra != (n%3 == 0) || who != (n%2 == 1) || Finished(chunk) != (n == chunks-1) {
				t.Fatalf("chunk %d is %v", n, chunk)
			}
		}
		<-s.Release(req)
	})
}

func TestPutErrorReported(t *testing.T) {
	m := newMem()
	m.putErr = errBoom
	s := mustSender(t, m, SenderOptions{})
	if err := s.Send(context.Background(), "r", nil); err != nil {
		t.Fatal(err)
	}
	shmtest.Eventually(t, 10*time.Second, "the put error", func() bool { return s.Err() != nil })
	if !errors.Is(s.Err(), errBoom) || s.Err().Error() != `stream: request "r" chunk 0: boom` {
		t.Fatalf("Err = %v", s.Err())
	}
	if err := s.Send(context.Background(), "r", nil); !errors.Is(err, errBoom) {
		t.Fatalf("next send: %v", err)
	}
	if err := s.Close(); !errors.Is(err, errBoom) {
		t.Fatalf("close: %v", err)
	}
}

// drainAsync runs Drain in a goroutine; the channel gets its result.
func drainAsync(ctx context.Context, s *Sender) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Drain(ctx) }()
	return done
}

func drained(t *testing.T, done <-chan error) error {
	t.Helper()
	return shmtest.Await(t, wait, "Drain to return", done)
}

// sendChunks sends chunks chunks of request, the last one finished.
func sendChunks(t *testing.T, s *Sender, request string, r, chunks int) {
	t.Helper()
	for n := range chunks {
		send := s.Send
		if n == chunks-1 {
			send = s.Finish
		}
		if err := send(context.Background(), request, map[string]any{"codes": map[string]any{"audio": codes(r, n)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// Drain returns once a consumer in another process has read every chunk
// sent: not while some are unread.
func TestDrainConsumedByAnotherProcess(t *testing.T) {
	const chunks = 12
	conntest.EachRing(t, func(t *testing.T, sc string, ringBytes int) {
		prod := conntest.Open(t, sc, "0", ringBytes)
		s := mustSender(t, prod, SenderOptions{QueueLimit: 4})
		req := shmtest.Key("drain")
		c := shmtest.Start(t, "consume", sc, strconv.Itoa(ringBytes), req)
		c.Expect(t, wait, "ready")
		sendChunks(t, s, req, 0, chunks)
		done := drainAsync(context.Background(), s)
		c.Send(t, "read 5")
		c.Expect(t, wait, "read 5")
		select {
		case err := <-done:
			t.Fatalf("Drain returned %v with 7 chunks unread", err)
		default:
		}
		c.Send(t, "rest")
		c.Expect(t, wait, "done 12")
		if err := drained(t, done); err != nil {
			t.Fatalf("Drain: %v", err)
		}
		c.Exited(t, wait)
		if n := <-s.Release(req); n != 0 {
			t.Fatalf("release after a drain reclaimed %d", n)
		}
		if err := s.Drain(context.Background()); err != nil {
			t.Fatalf("Drain with nothing left: %v", err)
		}
	})
}

// What Drain does when chunks are not claimed: a Release's retirement is
// not waited for; any other retirement is an error naming the chunk; ctx
// ends the wait; a transport that cannot tell claims is refused.
func TestDrainUnclaimed(t *testing.T) {
	ctx := context.Background()
	for _, rc := range conntest.Rings {
		t.Run(rc.Name, func(t *testing.T) {
			prod, recv := conntest.Edge(t, rc.Bytes)
			s := mustSender(t, prod, SenderOptions{})

			// Released before Drain, and while Drain waits.
			gone := shmtest.Key("released")
			sendChunks(t, s, gone, 1, 3)
			if n := <-s.Release(gone); n != 3 {
				t.Fatalf("release reclaimed %d", n)
			}
			if err := s.Drain(ctx); err != nil {
				t.Fatalf("Drain after a release: %v", err)
			}
			later := shmtest.Key("released-later")
			sendChunks(t, s, later, 2, 3)
			done := drainAsync(ctx, s)
			if n := <-s.Release(later); n != 3 {
				t.Fatalf("release reclaimed %d", n)
			}
			if err := drained(t, done); err != nil {
				t.Fatalf("Drain across a release: %v", err)
			}

			// Retired by the connector, not by a release.
			req := shmtest.Key("cleaned")
			sendChunks(t, s, req, 3, 2)
			ended, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.Drain(ended); !errors.Is(err, context.Canceled) {
				t.Fatalf("Drain with a done ctx: %v", err)
			}
			if err := s.flush(ctx); err != nil {
				t.Fatal(err)
			}
			rd := mustReader(t, recv, req, ReaderOptions{Prefetch: -1}) // one claim per Next
			if _, err := rd.Next(ctx); err != nil {                     // chunk 0 is claimed
				t.Fatal(err)
			}
			prod.Cleanup(Key(req, "0", 1))
			err := s.Drain(ctx)
			if !errors.Is(err, connector.ErrRetired) {
				t.Fatalf("Drain of a chunk retired by Cleanup: %v", err)
			}
			if want := fmt.Sprintf("request %q chunk 1", req); !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %s", err, want)
			}
			<-s.Release(req)
		})
	}
	s := mustSender(t, newMem(), SenderOptions{})
	if err := s.Drain(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Drain over a transport without claims: %v", err)
	}
}

// batchingTransport is a gatedTransport that also puts in batches
// (connector.BatchPutter): it records each PutMany's keys and puts them
// into mem, failing at failKey as a put would.
type batchingTransport struct {
	*gatedTransport
	mem     *memTransport
	failKey string

	mu      sync.Mutex
	batches [][]string
}

func (b *batchingTransport) PutMany(from, to string, puts []connector.Publication) int {
	var keys []string
	for _, p := range puts {
		keys = append(keys, p.Key)
	}
	b.mu.Lock()
	b.batches = append(b.batches, keys)
	b.mu.Unlock()
	for i := range puts {
		p := &puts[i]
		if p.Key == b.failKey {
			p.Err = errBoom
			return i + 1
		}
		p.Size, p.Descriptor, p.Err = b.mem.Put(from, to, p.Key, p.Payload)
	}
	return len(puts)
}

// Chunks queued behind a put go in one pass, up to 16, in order: the first
// chunk alone (its size bounds the runs after it), then the 20 queued
// while it was put as 16 and 4. A put that fails in a pass ends the
// stream there: the chunks after it are dropped, none put.
func TestSenderPutsQueuedChunksTogether(t *testing.T) {
	keys := func(from, to int) []string {
		var k []string
		for n := from; n < to; n++ {
			k = append(k, Key("r", "0", n))
		}
		return k
	}
	for _, tc := range []struct {
		name    string
		fail    int // the chunk whose put fails; -1: none
		batches [][]string
		put     int // chunks put: 0 .. put-1
	}{
		{"all", -1, [][]string{keys(1, 17), keys(17, 21)}, 21},
		{"failing", 5, [][]string{keys(1, 17)}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMem()
			b := &batchingTransport{gatedTransport: newGated(m), mem: m}
			if tc.fail >= 0 {
				b.failKey = Key("r", "0", tc.fail)
			}
			s := mustSender(t, b, SenderOptions{})
			ctx := context.Background()
			for n := range 21 {
				send := s.Send
				if n == 20 {
					send = s.Finish
				}
				if err := send(ctx, "r", map[string]any{"n": n}); err != nil {
					t.Fatal(err)
				}
			}
			if k := <-b.started; k != Key("r", "0", 0) {
				t.Fatalf("first put %s", k)
			}
			// The other 20 are queued: let every put through from now on
			// (one by one, they would each wait here).
			done := make(chan struct{})
			defer close(done)
			go func() {
				for {
					select {
					case b.gate <- struct{}{}:
					case <-done:
						return
					}
				}
			}()
			err := s.Close()
			if tc.fail >= 0 {
				if !errors.Is(err, errBoom) || !strings.Contains(err.Error(), fmt.Sprintf("chunk %d:", tc.fail)) {
					t.Fatalf("Close: %v", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if !slices.EqualFunc(b.batches, tc.batches, slices.Equal[[]string]) {
				t.Fatalf("batches %v, want %v", b.batches, tc.batches)
			}
			for n := range 21 {
				if m.has(Key("r", "0", n)) != (n < tc.put) {
					t.Fatalf("chunk %d put: %v, want %v", n, m.has(Key("r", "0", n)), n < tc.put)
				}
			}
			if s.Puts() != tc.put {
				t.Fatalf("Puts %d, want %d", s.Puts(), tc.put)
			}
		})
	}
}
