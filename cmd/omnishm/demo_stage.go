package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"omnishm/connector"
	"omnishm/stream"
	"omnishm/tensor"
)

// demoStageEnv marks a process as one of the demo's stages; its value is
// the stage's JSON stageConfig. The parent sets it when it re-runs its own
// binary, so stages need no hidden command-line flags.
const demoStageEnv = "OMNISHM_DEMO_STAGE"

// demoCrashEnv, for tests, names a stage that kills itself with SIGKILL
// once the pipeline starts, to check that the others are stopped.
const demoCrashEnv = "OMNISHM_DEMO_CRASH"

// stageConfig is what the parent tells a stage.
type stageConfig struct {
	Stage       int    `json:"stage"`
	Scope       string `json:"scope"`
	KeyPrefix   string `json:"key_prefix"` // request r is {KeyPrefix}r{r}: see demoRequests
	Requests    int    `json:"requests"`
	Chunks      int    `json:"chunks"`
	RingBytes   int    `json:"ring_bytes"`
	IntervalNS  int64  `json:"interval_ns"` // stage 0's pace: one chunk per request per interval (0: all at once)
	Out         string `json:"out"`
	UpstreamPID int    `json:"upstream_pid"` // the stage this one reads from (0 for stage 0)
	ParentPID   int    `json:"parent_pid"`
}

// stageEvent is one JSON line a stage writes on stdout for the parent.
type stageEvent struct {
	Event     string            `json:"event"` // ready, progress, done, health, error
	Stage     int               `json:"stage"`
	PID       int               `json:"pid,omitempty"`
	Chunks    int               `json:"chunks,omitempty"`   // progress, done: chunks received by stage 2
	Requests  int               `json:"requests,omitempty"` // progress, done: requests completed
	P50NS     int64             `json:"p50_ns,omitempty"`   // done: stage-0 send to stage-2 receipt
	P99NS     int64             `json:"p99_ns,omitempty"`
	MaxNS     int64             `json:"max_ns,omitempty"`
	Health    *connector.Health `json:"health,omitempty"`
	Reclaimed int               `json:"reclaimed,omitempty"` // health: undrained chunks released
	Error     string            `json:"error,omitempty"`
}

// stageProcess is one running stage: its connector and the line protocol
// to its parent (events on stdout; "go" and "close" on stdin).
type stageProcess struct {
	cfg      stageConfig
	requests []string
	conn     *connector.SHM
	outMu    sync.Mutex
	out      *json.Encoder
	control  chan string // lines from the parent; closed when stdin ends
}

func (p *stageProcess) say(e stageEvent) {
	e.Stage = p.cfg.Stage
	p.outMu.Lock()
	defer p.outMu.Unlock()
	p.out.Encode(e)
}

// await waits for the parent's line want; a closed stdin means the parent
// is gone.
func (p *stageProcess) await(ctx context.Context, want string) error {
	select {
	case l, ok := <-p.control:
		switch {
		case !ok:
			return errors.New("parent gone (stdin closed)")
		case l != want:
			return fmt.Errorf("parent said %q, want %q", l, want)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runStage runs one stage of the demo pipeline and returns its exit status.
func runStage(ctx context.Context, raw string, inv *invocation) int {
	p := &stageProcess{out: json.NewEncoder(inv.out), control: make(chan string, 4)}
	if err := json.Unmarshal([]byte(raw), &p.cfg); err != nil {
		return inv.fail(fmt.Errorf("stage config: %w", err))
	}
	p.requests = demoRequests(p.cfg.KeyPrefix, p.cfg.Requests)
	if err := p.run(ctx, inv.in); err != nil {
		p.say(stageEvent{Event: "error", Error: err.Error()})
		return inv.fail(fmt.Errorf("stage %d: %w", p.cfg.Stage, err))
	}
	return exitOK
}

func (p *stageProcess) run(ctx context.Context, stdin io.Reader) error {
	// The parent may have died between fork and the death signal being armed.
	if os.Getppid() != p.cfg.ParentPID {
		return errors.New("parent gone before start")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			p.control <- sc.Text()
		}
		close(p.control)
		cancel() // the parent is gone: stop at once
	}()

	opts := connector.DefaultOptions()
	opts.StageID = strconv.Itoa(p.cfg.Stage)
	opts.HostRingBytes = p.cfg.RingBytes
	opts.WakeupScope = p.cfg.Scope
	conn, err := connector.Open(opts)
	if err != nil {
		return err
	}
	p.conn = conn
	defer conn.Close()

	var up *peer
	if p.cfg.Stage > 0 {
		if up, err = watchPeer(p.cfg.UpstreamPID); err != nil {
			return fmt.Errorf("watch stage %d: %w", p.cfg.Stage-1, err)
		}
		defer up.close()
	}
	if p.cfg.Stage < 2 {
		if err := p.warmUp(); err != nil {
			return err
		}
	}
	p.say(stageEvent{Event: "ready", PID: os.Getpid()})
	if err := p.await(ctx, "go"); err != nil {
		return err
	}
	if os.Getenv(demoCrashEnv) == opts.StageID {
		self, _ := os.FindProcess(os.Getpid())
		self.Kill()
		select {} // the signal is on its way
	}

	var sender *stream.Sender
	switch p.cfg.Stage {
	case 0:
		sender, err = p.produce(ctx)
	case 1:
		sender, err = p.relay(ctx, up)
	case 2:
		err = p.collect(ctx, up)
	default:
		err = fmt.Errorf("no stage %d", p.cfg.Stage)
	}
	if err == nil {
		err = p.await(ctx, "close")
	}
	reclaimed := 0
	if sender != nil {
		// Downstream has drained everything by now: a release that
		// reclaims a chunk found one that was never received.
		for _, req := range p.requests {
			reclaimed += <-sender.Release(req)
		}
		if cerr := sender.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return err
	}
	h := conn.Health()
	if err := conn.Close(); err != nil {
		return err
	}
	p.say(stageEvent{Event: "health", Health: &h, Reclaimed: reclaimed})
	return nil
}

// warmUp makes the stage's out edge allocate its ring (SPEC §3: lazily,
// on the first put) before the clock starts, with one put that it retires
// at once: the one-time setup is not a chunk's latency. It counts in the
// stage's Health as one put.
func (p *stageProcess) warmUp() error {
	from := strconv.Itoa(p.cfg.Stage)
	key := demoWarmUpKey(p.requests[0], from)
	if _, _, err := p.conn.Put(from, strconv.Itoa(p.cfg.Stage+1), key, map[string]any{"warm_up": true}); err != nil {
		return fmt.Errorf("warm-up put: %w", err)
	}
	if !p.conn.Cleanup(key) {
		return fmt.Errorf("warm-up key %s was not retired", key)
	}
	return nil
}

// demoRequests are the request ids of a run. They are derived, not passed,
// so a long list never meets the kernel's limit on one environment string.
func demoRequests(keyPrefix string, n int) []string {
	ids := make([]string, n)
	for r := range ids {
		ids[r] = keyPrefix + "r" + strconv.Itoa(r)
	}
	return ids
}

// demoWarmUpKey shares the run's key prefix, so the leftover check sees it.
func demoWarmUpKey(firstRequest, from string) string { return firstRequest + "-warm-up-" + from }

// produce is stage 0: per request, a stream of [1, 28] int64 code chunks,
// the requests interleaved chunk by chunk.
func (p *stageProcess) produce(ctx context.Context) (*stream.Sender, error) {
	s, err := stream.NewSender(p.conn, "0", "1", stream.SenderOptions{})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for n := range p.cfg.Chunks {
		if n > 0 && p.cfg.IntervalNS > 0 {
			// Pacing, like a model emitting chunks at its own rate; an
			// interrupt must not wait out an interval of up to a minute.
			pace := time.NewTimer(time.Until(start.Add(time.Duration(int64(n) * p.cfg.IntervalNS))))
			select {
			case <-pace.C:
			case <-ctx.Done():
				pace.Stop()
				return s, ctx.Err()
			}
		}
		for r, req := range p.requests {
			codes, err := tensor.FromSlice(demoCodes(r, n), 1, codesPerChunk)
			if err != nil {
				return s, err
			}
			chunk := map[string]any{
				"codes": map[string]any{"audio": codes},
				"demo":  map[string]any{"seq": n, "t0_ns": monotonicNow()},
			}
			send := s.Send
			if n == p.cfg.Chunks-1 {
				send = s.Finish
			}
			if err := send(ctx, req, chunk); err != nil {
				return s, err
			}
		}
	}
	return s, nil
}

// relay is stage 1: it turns each request's code chunks into audio chunks,
// one goroutine per request, and streams them on to stage 2.
func (p *stageProcess) relay(ctx context.Context, up *peer) (*stream.Sender, error) {
	s, err := stream.NewSender(p.conn, "1", "2", stream.SenderOptions{})
	if err != nil {
		return nil, err
	}
	err = p.perRequest(ctx, func(ctx context.Context, r int, req string) error {
		rd, err := stream.NewReader(p.conn, "0", "1", req, stream.ReaderOptions{SenderAlive: up.alive})
		if err != nil {
			return err
		}
		for n := 0; ; n++ {
			chunk, err := rd.Next(ctx)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			codes, err := chunkTensor[int64](chunk, "codes", "audio")
			if err != nil {
				return fmt.Errorf("%s: %w", stream.Key(req, "0", n), err)
			}
			audio, err := tensor.FromSlice(synthesize(codes, n), 1, samplesPerChunk)
			if err != nil {
				return err
			}
			out := map[string]any{"audio": audio, "demo": chunk["demo"]}
			send := s.Send
			if stream.Finished(chunk) {
				send = s.Finish
			}
			if err := send(ctx, req, out); err != nil {
				return err
			}
		}
	})
	return s, err
}

// collect is stage 2: it checks every audio chunk (once, in order, the
// samples stage 1 must have made from stage 0's codes), writes one WAV file
// per request and reports the latencies.
func (p *stageProcess) collect(ctx context.Context, up *peer) error {
	var (
		received, completed atomic.Int64
		mu                  sync.Mutex
		latencies           []int64
	)
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				p.say(stageEvent{Event: "progress", Chunks: int(received.Load()), Requests: int(completed.Load())})
			}
		}
	})
	err := p.perRequest(ctx, func(ctx context.Context, r int, req string) error {
		rd, err := stream.NewReader(p.conn, "1", "2", req, stream.ReaderOptions{SenderAlive: up.alive})
		if err != nil {
			return err
		}
		w, err := newWAVWriter(filepath.Join(p.cfg.Out, req+".wav"))
		if err != nil {
			return err
		}
		defer w.abort()
		for n := 0; ; n++ {
			chunk, err := rd.Next(ctx)
			if err == io.EOF {
				if n != p.cfg.Chunks {
					return fmt.Errorf("request %s: finished after %d chunks, want %d", req, n, p.cfg.Chunks)
				}
				break
			}
			if err != nil {
				return err
			}
			now := monotonicNow()
			key := stream.Key(req, "1", n)
			demo, _ := chunk["demo"].(map[string]any)
			seq, ok1 := asInt(demo["seq"])
			t0, ok2 := asInt(demo["t0_ns"])
			if !ok1 || !ok2 {
				return fmt.Errorf("%s: no demo stamp in %v", key, demo)
			}
			if seq != int64(n) {
				return fmt.Errorf("%s: carries chunk %d: lost, duplicated or reordered", key, seq)
			}
			audio, err := chunkTensor[float32](chunk, "audio")
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if !slices.Equal(audio, synthesize(demoCodes(r, n), n)) {
				return fmt.Errorf("%s: samples differ from the codes stage 0 sent", key)
			}
			if err := w.write(audio); err != nil {
				return err
			}
			received.Add(1)
			mu.Lock()
			latencies = append(latencies, now-t0)
			mu.Unlock()
		}
		if err := w.finish(); err != nil {
			return err
		}
		completed.Add(1)
		return nil
	})
	close(stop)
	ticker.Wait()
	if err != nil {
		return err
	}
	slices.Sort(latencies)
	pct := func(q int) int64 { return latencies[(len(latencies)-1)*q/100] }
	p.say(stageEvent{Event: "done", Chunks: int(received.Load()), Requests: int(completed.Load()),
		P50NS: pct(50), P99NS: pct(99), MaxNS: latencies[len(latencies)-1]})
	return nil
}

// perRequest runs fn for every request concurrently and returns the first
// error; the first failure cancels the others.
func (p *stageProcess) perRequest(ctx context.Context, fn func(ctx context.Context, r int, req string) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for r, req := range p.requests {
		wg.Go(func() {
			if err := fn(ctx, r, req); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// chunkTensor returns the tensor at path in chunk as a []T.
func chunkTensor[T tensor.Element](chunk map[string]any, path ...string) ([]T, error) {
	var v any = chunk
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("no %v in chunk", path)
		}
		v = m[k]
	}
	t, ok := v.(*tensor.Tensor)
	if !ok {
		return nil, fmt.Errorf("%v is %T, want a tensor", path, v)
	}
	return tensor.Values[T](t)
}

// asInt reads an integer a msgpack or JSON decoder produced.
func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		return int64(n), true
	}
	return 0, false
}

// wavWriter streams 16-bit PCM to a file and writes the header last, when
// the sample count is known.
type wavWriter struct {
	f     *os.File
	w     *bufio.Writer
	bytes int
	buf   []byte
}

func newWAVWriter(path string) (*wavWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := &wavWriter{f: f, w: bufio.NewWriter(f)}
	if _, err := w.w.Write(make([]byte, wavHeaderSize)); err != nil {
		w.abort()
		return nil, err
	}
	return w, nil
}

func (w *wavWriter) write(x []float32) error {
	w.buf = pcm16(w.buf[:0], x)
	w.bytes += len(w.buf)
	_, err := w.w.Write(w.buf)
	return err
}

func (w *wavWriter) finish() error {
	err := w.w.Flush()
	if err == nil {
		_, err = w.f.WriteAt(wavHeader(w.bytes), 0)
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("write wav: %w", err)
	}
	return nil
}

// abort closes a file that was not finished (no-op after finish).
func (w *wavWriter) abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}
