//go:build linux

package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"omnishm/connector"
	"omnishm/frame"
	"omnishm/internal/conntest"
	"omnishm/internal/race"
	"omnishm/internal/shmtest"
	"omnishm/internal/vectortest"
	"omnishm/jsonform"
	"omnishm/proc"
	"omnishm/ring"
	"omnishm/tensor"
	"omnishm/wire"
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

// closedAtEnd returns v, which the test closes when it ends, unless err
// is set: then it fails the test.
func closedAtEnd[T interface{ Close() error }](t *testing.T, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func mustSender(t *testing.T, tr connector.Transport, opts SenderOptions) *Sender {
	t.Helper()
	s, err := NewSender(tr, "0", "1", opts)
	return closedAtEnd(t, s, err)
}

func mustReader(t *testing.T, tr connector.Transport, request string, opts ReaderOptions) *Reader {
	t.Helper()
	r, err := NewReader(tr, "0", "1", request, opts)
	return closedAtEnd(t, r, err)
}

var keyOf = Key // Key, not inlined (TestKeyAndPrefix)

func TestKeyAndPrefix(t *testing.T) {
	if got := Key("req-1", "0", 12); got != "req-1_0_12" {
		t.Fatalf("Key = %q", got)
	}
	if got := Prefix("req-1", "0"); got != "req-1_0_" {
		t.Fatalf("Prefix = %q", got)
	}
	long := strings.Repeat("r", 100) // past Key's stack buffer
	if got := Key(long, "12", 345678); got != long+"_12_345678" {
		t.Fatalf("Key of a long request = %q", got)
	}
	if race.Enabled {
		return
	}
	// A chunk key is made per chunk on both ends of a stream. Called
	// through a variable, so that it is not inlined here, where the
	// compiler could keep a part of it on the stack: the Sender's and
	// the Reader's calls are not inlined either.
	if n := testing.AllocsPerRun(100, func() { keyOf("req-1", "0", 12345) }); n != 1 {
		t.Fatalf("Key allocates %v times, want 1 (its string)", n)
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

// TestChunkIsTheTypedPayload: a chunk built by the Sender has the shape of
// vLLM-Omni's OmniPayloadStruct (codes.audio, meta.finished as a 0-d bool
// tensor), checked against the Python reference's typed_payload vector;
// and Finished reads that vector's mark, from both byte forms.
func TestChunkIsTheTypedPayload(t *testing.T) {
	want := vectortest.Read(t, "typed_payload.json")
	codes := make([]int64, 28)
	for i := range codes {
		codes[i] = int64(i)
	}
	audio, _ := tensor.FromSlice(codes, 1, 28)
	chunk, err := newChunk(map[string]any{
		"codes":       map[string]any{"audio": audio},
		"meta":        map[string]any{"left_context_size": 0},
		"kv_metadata": map[string]any{"binary_handle": []byte{0x00, 0xff, 0x10}},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := jsonform.Marshal(chunk)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("chunk\n%s\nwant the reference typed payload\n%s", got, want)
	}

	for _, form := range []struct {
		file   string
		decode func([]byte) (any, error)
	}{{"typed_payload.frame", frame.Decode}, {"typed_payload.msgpack", wire.Unmarshal}} {
		v, err := form.decode(vectortest.Read(t, form.file))
		if err != nil {
			t.Fatalf("%s: %v", form.file, err)
		}
		m, ok := asMap(v)
		if !ok {
			t.Fatalf("%s decodes to %T", form.file, v)
		}
		meta, _ := asMap(m["meta"])
		mark, ok := meta["finished"].(*tensor.Tensor)
		if !ok || mark.DType != tensor.Bool || len(mark.Shape) != 0 || Finished(m) {
			t.Fatalf("%s: meta %v: want a 0-d bool finished mark that reads false", form.file, meta)
		}
		mark.Data[0] = 1 // the decoded payload is ours (SPEC §3: nothing aliases shared memory)
		if !Finished(m) {
			t.Fatalf("%s: a true mark reads false", form.file)
		}
	}
}

// TestBadNames: stage ids and request ids that cannot make chunk keys are
// refused at the call, with the sentinel of their owner.
func TestBadNames(t *testing.T) {
	m := newMem()
	for _, edge := range [][2]string{{"", "1"}, {"0", ""}, {"talker", "1"}, {"0", "1/2"}} {
		if _, err := NewSender(m, edge[0], edge[1], SenderOptions{}); !errors.Is(err, connector.ErrBadStage) {
			t.Errorf("sender of edge %q: %v", edge, err)
		}
		if _, err := NewReader(m, edge[0], edge[1], "r", ReaderOptions{}); !errors.Is(err, connector.ErrBadStage) {
			t.Errorf("reader of edge %q: %v", edge, err)
		}
	}
	s := mustSender(t, m, SenderOptions{})
	for _, req := range []string{"", "a/b", "a\x00b", "\xff", strings.Repeat("r", 240)} {
		if err := s.Send(context.Background(), req, nil); !errors.Is(err, ErrBadRequest) {
			t.Errorf("request %q: %v", req, err)
		}
		if _, err := NewReader(m, "0", "1", req, ReaderOptions{}); !errors.Is(err, ErrBadRequest) {
			t.Errorf("reader of %q: %v", req, err)
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

// Over the ring, a Reader claims the chunks that are there already in one
// pass, up to Prefetch of them, returns them in order, and Close drops
// those it has not returned; a negative Prefetch claims one at a time. A
// run starts at a chunk the receiver has seen (ring.Transport.TakeReady):
// the first Next's receive scans the ring, the second claims the run.
func TestReaderClaimsAhead(t *testing.T) {
	const chunks = 10
	for _, tc := range []struct {
		prefetch, claimed int // claimed by the first two Next calls
	}{{4, 5}, {0, chunks}, {-1, 2}} {
		t.Run(strconv.Itoa(tc.prefetch), func(t *testing.T) {
			send, recv := conntest.Edge(t, ring.DefaultCapacity)
			req := shmtest.Key("ahead")
			for n := range chunks {
				c, err := newChunk(map[string]any{"codes": map[string]any{"audio": codes(0, n)}}, n == chunks-1)
				if err != nil {
					t.Fatal(err)
				}
				conntest.MustPut(t, send, "0", "1", Key(req, "0", n), c)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			rd := mustReader(t, recv, req, ReaderOptions{Prefetch: tc.prefetch})
			for range 2 {
				if _, err := rd.Next(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got := recv.Health().Gets; int(got) != tc.claimed {
				t.Fatalf("the first two Next calls claimed %d chunks, want %d", got, tc.claimed)
			}
			if tc.prefetch == 4 {
				rd.Close() // drops chunks 2-4; 5 on stay published
				if got := recv.Health().Gets; got != 5 || !send.Cleanup(Key(req, "0", 5)) {
					t.Fatalf("after Close: %d claimed, chunk 5 not left published", got)
				}
				return
			}
			for n := 2; n < chunks; n++ {
				c, err := rd.Next(ctx)
				if err != nil {
					t.Fatalf("chunk %d: %v", n, err)
				}
				audio, _ := asMap(c["codes"])
				if got, _ := audio["audio"].(*tensor.Tensor); !got.Equal(codes(0, n)) || Finished(c) != (n == chunks-1) {
					t.Fatalf("chunk %d: codes %v, finished %v", n, got, Finished(c))
				}
			}
			if _, err := rd.Next(ctx); err != io.EOF || recv.Health().Gets != chunks {
				t.Fatalf("after the last chunk: %v, %d claimed", err, recv.Health().Gets)
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

// A reader of a one-chunk request is one allocation beside its first
// chunk's key: a fanout of one-chunk requests makes one per chunk (the
// key's slice was a second, and its Reader a size class larger).
func TestNewReaderAllocatesOnce(t *testing.T) {
	if race.Enabled {
		t.Skip("allocations are not countable under the race detector")
	}
	_, recv := conntest.Edge(t, ring.DefaultCapacity)
	n := testing.AllocsPerRun(100, func() {
		r, err := NewReader(recv, "0", "1", "req-alloc", ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
	})
	if n > 2 {
		t.Fatalf("NewReader made %v allocations, want 2 (its first key and the Reader)", n)
	}
}

// A reader waiting in Next is parked in its transport's RecvMessage called
// from Next itself, with no helper of the Reader's in between: every
// collection scans each parked goroutine's stack frame by frame, and a
// stage parks a reader per open request (BenchmarkParkedReadersGC).
func TestParkedReaderStackIsShallow(t *testing.T) {
	_, recv := conntest.Edge(t, ring.DefaultCapacity)
	rd := mustReader(t, recv, shmtest.Key("parked"), ReaderOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := rd.Next(ctx)
		done <- err
	}()
	shmtest.Eventually(t, wait, "the reader to wait", func() bool { return recv.Waiting() == 1 })
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v, want context.Canceled", err)
	}
	for _, g := range strings.Split(stacks, "\n\n") {
		// Innermost first: each frame is a function line and a file line.
		lines := strings.Split(g, "\n")
		for i, l := range lines {
			if !strings.HasPrefix(l, "omnishm/stream.(*Reader).Next(") {
				continue
			}
			if i < 3 || !strings.HasPrefix(lines[i-2], "omnishm/connector.(*SHM).RecvMessage(") {
				t.Fatalf("a parked reader's Next calls RecvMessage through other frames:\n%s", g)
			}
			return
		}
	}
	t.Fatalf("no goroutine in Reader.Next:\n%s", stacks)
}

// A Reader that would block in Recv must be on the edge's receiving stage:
// on any other, Recv would wait on another edge.
func TestReaderOnAnotherStageIsRefused(t *testing.T) {
	if _, err := NewReader(newMem(), "1", "2", "r", ReaderOptions{}); !errors.Is(err, connector.ErrBadStage) {
		t.Fatalf("reader of 1->2 on a stage-1 receiver: %v", err)
	}
	// A transport that only polls names no stage: any edge is fine.
	if _, err := NewReader(pollOnly{newMem()}, "1", "2", "r", ReaderOptions{}); err != nil {
		t.Fatal(err)
	}
	// The producer's own connector, which receives as no stage, would take
	// the chunks meant for the receiving stage: refused, and a Mux too.
	producer := conntest.Open(t, shmtest.Scope(t), connector.NoStage, 0)
	if _, err := NewReader(producer, "0", "1", "r", ReaderOptions{}); !errors.Is(err, connector.ErrBadStage) {
		t.Errorf("reader of 0->1 on the producer's connector: %v", err)
	}
	if _, err := NewMux(producer, "0", "1", MuxOptions{}); !errors.Is(err, connector.ErrBadStage) {
		t.Errorf("mux of 0->1 on the producer's connector: %v", err)
	}
}

// TestReaderSenderGone: a reader whose sender has exited still delivers
// the chunks published before, then gives up with ErrSenderGone; one with
// no sender given gives up after its progress timeout; a live sender keeps
// a reader waiting until ctx ends.
func TestReaderSenderGone(t *testing.T) {
	self, err := proc.Self()
	if err != nil {
		t.Fatal(err)
	}
	// This pid with another start time: the process that was is gone.
	dead := proc.ID{PID: self.PID, Start: self.Start + 1}
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			m := newMem()
			tr := tc.wrap(m)
			ctx := context.Background()
			rd := mustReader(t, tr, "r", ReaderOptions{Sender: dead, ProgressTimeout: time.Hour})
			m.Put("0", "1", Key("r", "0", 0), map[string]any{})
			if _, err := rd.Next(ctx); err != nil {
				t.Fatalf("chunk put before death: %v", err)
			}
			if _, err := rd.Next(ctx); !errors.Is(err, ErrSenderGone) || !strings.Contains(err.Error(), "dead; the last chunk received, 0, came ") {
				t.Fatalf("dead sender: %v", err)
			}
			if _, err := rd.Next(ctx); !errors.Is(err, ErrSenderGone) {
				t.Fatalf("after the sender's exit: %v", err)
			}
			quiet := mustReader(t, tr, "q", ReaderOptions{ProgressTimeout: 20 * time.Millisecond})
			if _, err := quiet.Next(ctx); !errors.Is(err, ErrSenderGone) || !strings.Contains(err.Error(), "no chunk received yet, its producer unknown") {
				t.Fatalf("silent sender: %v", err)
			}
			m.Put("0", "1", Key("q", "0", 0), map[string]any{})
			if _, err := quiet.Next(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := quiet.Next(ctx); !errors.Is(err, ErrSenderGone) || !strings.Contains(err.Error(), `request "q" chunk 1: no chunk within 20ms; the last chunk received, 0, came `) {
				t.Fatalf("silent after chunk 0: %v", err)
			}
			watched := mustReader(t, tr, "w", ReaderOptions{Sender: self, ProgressTimeout: 20 * time.Millisecond})
			if _, err := watched.Next(ctx); !errors.Is(err, ErrSenderGone) || !strings.Contains(err.Error(), fmt.Sprintf("sender process %v alive", self)) {
				t.Fatalf("silent live sender: %v", err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := quiet.Next(cctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled: %v", err)
			}
			live := mustReader(t, tr, "l", ReaderOptions{Sender: self, CheckInterval: time.Millisecond, ProgressTimeout: time.Hour})
			sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			if _, err := live.Next(sctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("live sender: %v", err)
			}
		})
	}
}

// TestReaderKeepsItsWaitContext: the Next calls of a reader with the same
// ctx wait under one context (not a context, timer and exit hook per
// chunk); one kept from an older deadline that ends first does not end the
// stream, and a new ctx gets a new one.
func TestReaderKeepsItsWaitContext(t *testing.T) {
	m := newMem()
	ctx := context.Background()
	rd := mustReader(t, m, "r", ReaderOptions{ProgressTimeout: time.Hour})
	var kept []context.Context
	for n := range 2 {
		m.Put("0", "1", Key("r", "0", n), map[string]any{})
		if _, err := rd.Next(ctx); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, rd.waiting.ctx)
	}
	if kept[0] == nil || kept[0] != kept[1] {
		t.Fatalf("wait contexts %v: want one kept", kept)
	}
	// A kept context whose deadline, an older one, comes first: the wait
	// goes on in a new one until the caller's ctx ends.
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	early, stop := context.WithTimeout(sctx, time.Millisecond)
	defer stop()
	rd.waiting.drop()
	rd.waiting = waitScope{parent: sctx, ctx: early, watched: [2]*exitWatch{rd.sender, rd.producer}, shared: &sharedWait{ctx: early, cancel: stop}}
	if _, err := rd.Next(sctx); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrSenderGone) {
		t.Fatalf("after a kept context's early end: %v, want the caller's deadline", err)
	}
	if rd.waiting.ctx == early {
		t.Fatal("the ended context is still kept")
	}
}

// TestReadersShareAWaitContext: readers waiting under one ctx whose
// progress deadlines fall in one slot share one wait context (not a
// context and timer per request), and the last to be done ends it.
func TestReadersShareAWaitContext(t *testing.T) {
	m := newMem()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rds := make([]*Reader, 3)
	for i := range rds {
		rds[i] = mustReader(t, m, "s"+strconv.Itoa(i), ReaderOptions{ProgressTimeout: time.Hour})
		rds[i].deadline = time.Now().Add(time.Hour)
		rds[i].scope(ctx)
	}
	slot := int64(time.Hour / waitSlots)
	end := func(rd *Reader) int64 { return (rd.deadline.UnixNano() + slot - 1) / slot }
	for i, rd := range rds[1:] {
		if end(rd) == end(rds[i]) && rd.waiting.ctx != rds[i].waiting.ctx {
			t.Fatalf("readers %d and %d, deadlines in one slot, wait in two contexts", i, i+1)
		}
	}
	shared := rds[0].waiting.ctx
	for i, rd := range rds {
		if err := rd.Close(); err != nil {
			t.Fatal(err)
		}
		if i < len(rds)-1 && rds[i+1].waiting.ctx == shared && shared.Err() != nil {
			t.Fatalf("reader %d's Close ended the context others wait in", i)
		}
	}
	if shared.Err() == nil {
		t.Fatal("the shared wait context outlives its readers")
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if len(sharedWaits) != 0 {
		t.Fatalf("%d shared wait contexts left", len(sharedWaits))
	}
}

func TestReaderBadChunk(t *testing.T) {
	m := newMem()
	m.Put("0", "1", Key("r", "0", 0), []byte("x"))
	if _, err := mustReader(t, m, "r", ReaderOptions{}).Next(context.Background()); !errors.Is(err, ErrBadChunk) {
		t.Fatalf("non-map chunk: %v", err)
	}
}

// Readers of one sender share one watch of it (one pidfd however many
// requests a stage reads); the last Close leaves it idle, for the next
// reader of that sender.
func TestReadersOfOneSenderShareOneWatch(t *testing.T) {
	self, err := proc.Self()
	if err != nil {
		t.Fatal(err)
	}
	m := newMem()
	a := mustReader(t, m, "a", ReaderOptions{Sender: self})
	b := mustReader(t, m, "b", ReaderOptions{Sender: self})
	if a.sender == nil || a.sender != b.sender || a.sender.refs != 2 {
		t.Fatalf("watches %p %p", a.sender, b.sender)
	}
	refs := func() int { watchesMu.Lock(); defer watchesMu.Unlock(); return watches[self].refs }
	w := a.sender
	a.Close()
	a.Close()
	if refs() != 1 {
		t.Fatal("the watch was released while a reader holds it")
	}
	b.Close()
	if refs() != 0 {
		t.Fatal("the watch is held with no reader")
	}
	if c := mustReader(t, m, "c", ReaderOptions{Sender: self}); c.sender != w || refs() != 1 {
		t.Fatal("the idle watch was not reused")
	}
}

// At most maxIdle watches stay open with no reader: the oldest idle one is
// closed when another goes idle, and an idle watch whose process exits is
// closed at once. Each watch is of a child process of its own.
func TestIdleWatchesAreBounded(t *testing.T) {
	ids := make([]proc.ID, maxIdle+1)
	kids := make([]*shmtest.Proc, len(ids))
	for i := range ids {
		kids[i] = shmtest.Start(t, "wait")
		kids[i].Expect(t, wait, "ready")
		ids[i] = kids[i].ID(t)
	}
	open := func(id proc.ID) bool { watchesMu.Lock(); defer watchesMu.Unlock(); return watches[id] != nil }
	watchesMu.Lock() // start with none idle: earlier tests' may still be
	for _, w := range idle {
		w.drop()
	}
	idle = nil
	watchesMu.Unlock()
	for _, id := range ids {
		watchExit(id).release()
	}
	if open(ids[0]) {
		t.Fatalf("%d idle watches open: the oldest was not closed", len(ids))
	}
	for _, id := range ids[1:] {
		if !open(id) {
			t.Fatalf("idle watch of %v closed while %d are allowed", id, maxIdle)
		}
	}
	kids[1].Send(t, "exit")
	kids[1].Exited(t, wait)
	shmtest.Eventually(t, wait, "the exited process's idle watch to close", func() bool { return !open(ids[1]) })
	if !open(ids[2]) {
		t.Fatal("another idle watch closed with it")
	}
}

// NextInto decodes each chunk's tensor into the memory the caller
// supplies, on every path, and a chunk the memory has no room for is not
// consumed: NextInto with more room returns it. The reader claims one
// chunk at a time: a chunk a Next would have claimed ahead waits.
func TestNextIntoSuppliedMemory(t *testing.T) {
	const n = 16 << 10 // float32s: 64 KiB, the size from which per-key tensors come from a
	conntest.EachRing(t, func(t *testing.T, sc string, ringBytes int) {
		prod, recv := conntest.Open(t, sc, "0", ringBytes), conntest.Open(t, sc, "1", ringBytes)
		s, err := NewSender(prod, "0", "1", SenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		req := shmtest.Key("into")
		ctx := context.Background()
		for i := range 3 {
			send := s.Send
			if i == 2 {
				send = s.Finish
			}
			data := make([]float32, n)
			for j := range data {
				data[j] = float32(i*n + j)
			}
			tt, err := tensor.FromSlice(data, n)
			if err != nil {
				t.Fatal(err)
			}
			if err := send(ctx, req, map[string]any{"hidden": tt}); err != nil {
				t.Fatal(err)
			}
		}
		rd := mustReader(t, recv, req, ReaderOptions{})
		tight := make([]byte, 1024)
		buf := make([]byte, 4*n+(64<<10))
		var arena frame.Arena
		for i := range 3 {
			arena.Reset(tight)
			if _, err := rd.NextInto(ctx, &arena); !errors.Is(err, frame.ErrAllocate) {
				t.Fatalf("chunk %d into 1 KiB: %v, want frame.ErrAllocate", i, err)
			}
			arena.Reset(buf)
			chunk, err := rd.NextInto(ctx, &arena)
			if err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
			got, ok := chunk["hidden"].(*tensor.Tensor)
			if !ok {
				t.Fatalf("chunk %d: hidden is %T", i, chunk["hidden"])
			}
			vals, err := tensor.Values[float32](got)
			if err != nil || len(vals) != n || vals[0] != float32(i*n) || vals[n-1] != float32(i*n+n-1) {
				t.Fatalf("chunk %d: %d values, %v", i, len(vals), err)
			}
			if !within(got.Data, buf) {
				t.Fatalf("chunk %d: its tensor is not in the supplied memory", i)
			}
		}
		if _, err := rd.NextInto(ctx, &arena); err != io.EOF {
			t.Fatalf("after the last chunk: %v", err)
		}
		<-s.Release(req)
	})
}

// within reports whether b lies inside buf.
func within(b, buf []byte) bool {
	if len(b) == 0 || len(buf) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(&buf[0]))
	p := uintptr(unsafe.Pointer(&b[0]))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(buf))
}

// BenchmarkStream moves one request's [1, 28] int64 chunks through a Sender
// and a Reader on two real connectors in one process; ns/op is per chunk.
// The in-memory transport is the baseline: the stream's own cost.
func BenchmarkStream(b *testing.B) {
	cases := []struct {
		name string
		open func(b *testing.B) (prod, recv connector.Transport)
	}{
		{"memory", func(b *testing.B) (connector.Transport, connector.Transport) { m := newMem(); return m, m }},
	}
	for _, rc := range conntest.Rings {
		cases = append(cases, struct {
			name string
			open func(b *testing.B) (prod, recv connector.Transport)
		}{rc.Name, func(b *testing.B) (connector.Transport, connector.Transport) {
			sc := shmtest.Scope(b)
			return conntest.Open(b, sc, "0", rc.Bytes), conntest.Open(b, sc, "1", rc.Bytes)
		}})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			prod, recv := c.open(b)
			s, err := NewSender(prod, "0", "1", SenderOptions{QueueLimit: 64})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			req := shmtest.Key("bench")
			rd, err := NewReader(recv, "0", "1", req, ReaderOptions{})
			if err != nil {
				b.Fatal(err)
			}
			payload := map[string]any{"codes": map[string]any{"audio": codes(0, 0)}}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for i := range b.N {
					send := s.Send
					if i == b.N-1 {
						send = s.Finish
					}
					send(ctx, req, payload)
				}
			}()
			readToEnd(b, ctx, rd)
			b.StopTimer()
			<-s.Release(req)
		})
	}
}

// BenchmarkIdleReaders measures N stream readers waiting in Next on one
// connector with nothing arriving: idle CPU (% of one core, over a 2 s
// window: a measurement interval, not a wait for a condition) and OS
// threads. Run with -benchtime=1x, one sub-benchmark per process (threads
// a runtime made stay).
func BenchmarkIdleReaders(b *testing.B) {
	for _, n := range []int{50, 1000} {
		b.Run("readers="+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				sc := shmtest.Scope(b)
				recv := conntest.Open(b, sc, "1", ring.DefaultCapacity)
				stop := parkReaders(b, recv, n)
				time.Sleep(time.Second) // the safety re-poll backs off
				c0, w0 := shmtest.CPUTime(b), time.Now()
				time.Sleep(2 * time.Second)
				b.ReportMetric(100*float64(shmtest.CPUTime(b)-c0)/float64(time.Since(w0)), "idle-cpu-%")
				b.ReportMetric(float64(shmtest.Threads(b)), "threads")
				stop()
			}
		})
	}
}

// parkReaders starts n readers of requests of their own waiting in Next on
// recv, and returns once they all wait; stop ends them.
func parkReaders(b *testing.B, recv *connector.SHM, n int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		rd, err := NewReader(recv, "0", "1", shmtest.Key("parked"), ReaderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			defer rd.Close()
			rd.Next(ctx)
		})
	}
	shmtest.Eventually(b, wait, "the readers to wait", func() bool { return recv.Waiting() == n })
	return func() {
		cancel()
		wg.Wait()
	}
}

// BenchmarkParkedReadersGC is the CPU a garbage collection spends (all of
// its workers) with 1000 stream readers parked in Next on one connector:
// it scans every parked goroutine's stack, frame by frame, each cycle.
func BenchmarkParkedReadersGC(b *testing.B) {
	_, recv := conntest.Edge(b, ring.DefaultCapacity)
	stop := parkReaders(b, recv, 1000)
	defer stop()
	gcCPU := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	runtime.GC()
	metrics.Read(gcCPU)
	c0 := gcCPU[0].Value.Float64()
	for b.Loop() {
		runtime.GC()
	}
	metrics.Read(gcCPU)
	b.ReportMetric((gcCPU[0].Value.Float64()-c0)/float64(b.N)*1e6, "gc-cpu-µs/cycle")
}

// funcCtx is a context of a comparable type whose value is not: its ==
// panics (a func in an interface field).
type funcCtx struct {
	context.Context
	f any
}

// A ctx whose value cannot be compared gets a wait context of its own,
// called again and again: no panic, nothing left shared.
func TestReaderIncomparableContext(t *testing.T) {
	m := newMem()
	rd := mustReader(t, m, "f", ReaderOptions{ProgressTimeout: time.Hour})
	ctx := funcCtx{context.Background(), func() {}}
	rd.deadline = time.Now().Add(time.Hour)
	for range 2 {
		if rd.scope(ctx).Err() != nil {
			t.Fatal("a fresh wait context ended")
		}
	}
	m.Put("0", "1", Key("f", "0", 0), map[string]any{"finished": true})
	if _, err := rd.Next(ctx); err != nil {
		t.Fatal(err)
	}
	rd.Close()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if len(sharedWaits) != 0 {
		t.Fatalf("%d shared wait contexts left", len(sharedWaits))
	}
}

// zeroCtx is a context of no size whose type is not comparable.
type zeroCtx struct{ _ [0]func() }

func (zeroCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (zeroCtx) Done() <-chan struct{}       { return nil }
func (zeroCtx) Err() error                  { return nil }
func (zeroCtx) Value(any) any               { return nil }

// comparableContext says what reflect.Value.Comparable says, without its
// allocations for the usual contexts (a reader of a one-chunk request asks
// once per request).
func TestComparableContext(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"Background", context.Background(), true},
		{"TODO", context.TODO(), true},
		{"WithCancel", cancelled, true},
		{"WithoutCancel", context.WithoutCancel(cancelled), true},
		{"a struct holding an int", funcCtx{context.Background(), 1}, true},
		{"a struct holding a func", funcCtx{context.Background(), func() {}}, false},
		{"an incomparable type of no size", zeroCtx{}, false},
		{"nil", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := comparableContext(c.ctx); got != c.want {
				t.Fatalf("comparableContext = %v, want %v", got, c.want)
			}
			if got := reflect.ValueOf(c.ctx).Comparable(); got != c.want {
				t.Fatalf("the case is wrong: reflect says %v", got)
			}
		})
	}
	if race.Enabled {
		return // allocations are not countable under the race detector
	}
	for _, ctx := range []context.Context{context.Background(), cancelled} {
		if n := testing.AllocsPerRun(100, func() { comparableContext(ctx) }); n != 0 {
			t.Errorf("comparableContext(%v) allocates %v times, want none", ctx, n)
		}
	}
}

// BenchmarkParkedFanout is a stage's steady state with many requests
// open, in one process: 1000 goroutines parked, each in a one-chunk
// request's Reader (reader) or in Recv (recv, the same keys and ring),
// while a producer puts one finished chunk per waiter per round. ns/msg is
// wall time per delivery, put included, on every CPU; the difference
// between the two is what a Reader adds to a delivery (bench's fanout
// mode measures the same across processes, with the harness's noise).
func BenchmarkParkedFanout(b *testing.B) {
	for _, mode := range []string{"recv", "reader"} {
		b.Run(mode, func(b *testing.B) {
			prod, recv := conntest.Edge(b, ring.DefaultCapacity)
			data, _ := tensor.Zeros(tensor.Float32, 128) // 512 B, as bench's fanout
			payload := map[string]any{"data": data}
			if mode == "reader" {
				payload, _ = newChunkInto(nil, payload, true)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const n = 1000
			prefix := shmtest.Key("fan")
			request := func(i, round int) string { return prefix + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(round) }
			rounds := b.N/n + 1
			done := make(chan error, n)
			for i := range n {
				go func() {
					for round := range rounds {
						req := request(i, round)
						var err error
						if mode == "recv" {
							_, _, err = recv.Recv(ctx, "0", Key(req, "0", 0))
						} else {
							var rd *Reader
							if rd, err = NewReader(recv, "0", "1", req, ReaderOptions{ProgressTimeout: time.Hour}); err == nil {
								_, err = rd.Next(ctx)
								rd.Close()
							}
						}
						done <- err
						if err != nil {
							return
						}
					}
				}()
			}
			shmtest.Eventually(b, wait, "the waiters to wait", func() bool { return recv.Waiting() == n })
			b.ResetTimer()
			for round := range rounds {
				for i := range n {
					if _, _, err := prod.Put("0", "1", Key(request(i, round), "0", 0), payload); err != nil {
						b.Fatal(err)
					}
				}
				for range n {
					if err := <-done; err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rounds*n), "ns/msg")
		})
	}
}

// BenchmarkRequestGoroutine is a one-chunk request read by a Reader on a
// goroutine of its own, started for the request (fresh), as a stage that
// serves each request on a new goroutine does, or handed to one goroutine
// that has read requests before (reused). The difference is what a new
// goroutine's first receive costs beyond the receive itself: its stack,
// which starts at 2 KiB, grows to 8 or 16 KiB on the way (the receive path
// is 5 to 7.5 KiB deep where it decodes, deeper when a leading Recv does),
// copied at each step (session 11: 24-26 µs fresh against 12-13 µs reused;
// a goroutine whose stack was grown to 8 KiB first took 14 µs).
func BenchmarkRequestGoroutine(b *testing.B) {
	for _, mode := range []string{"fresh", "reused"} {
		b.Run(mode, func(b *testing.B) {
			prod, recv := conntest.Edge(b, ring.DefaultCapacity)
			data, _ := tensor.Zeros(tensor.Float32, 128) // 512 B, as BenchmarkParkedFanout
			payload, err := newChunkInto(nil, map[string]any{"data": data}, true)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			prefix := shmtest.Key("goroutine")
			read := func(req string) error {
				rd, err := NewReader(recv, "0", "1", req, ReaderOptions{ProgressTimeout: time.Hour})
				if err != nil {
					return err
				}
				defer rd.Close()
				_, err = rd.Next(ctx)
				return err
			}
			work, done := make(chan string), make(chan error, 1) // buffered: a reader outlives a failed benchmark
			defer close(work)
			if mode == "reused" {
				go func() {
					for req := range work {
						done <- read(req)
					}
				}()
			}
			for i := 0; b.Loop(); i++ {
				req := prefix + "-" + strconv.Itoa(i)
				if mode == "fresh" {
					go func() { done <- read(req) }()
				} else {
					work <- req
				}
				if _, _, err := prod.Put("0", "1", Key(req, "0", 0), payload); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// readToEnd reads rd's chunks to the end of its stream (io.EOF) and fails
// tb on an error.
func readToEnd(tb testing.TB, ctx context.Context, rd *Reader) {
	tb.Helper()
	for {
		if _, err := rd.Next(ctx); err == io.EOF {
			return
		} else if err != nil {
			tb.Fatal(err)
		}
	}
}
