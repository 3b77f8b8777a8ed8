//go:build linux

package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/frame"
	"omnishm/internal/hostclock"
	"omnishm/internal/reexec"
	_ "omnishm/natsconn" // connector.New builds NatsConnector stages
	"omnishm/proc"
	"omnishm/stream"
	"omnishm/tensor"

	"golang.org/x/sys/unix"
)

// A stage is this executable again, in role stageRole, with its JSON
// stageConfig as its one argument. It talks to the parent in lines: JSON
// events on stdout; "go" and "close" on stdin, whose end means the parent
// is gone.
const stageRole = "omnishm-demo-stage"

func init() { reexec.Register(stageRole, runStage) }

// crashEnv, for tests, names a stage that kills itself with SIGKILL once
// the pipeline starts, to check that the others are stopped.
const crashEnv = "OMNISHM_DEMO_CRASH"

// ProfileEnv, when set to a path prefix, has every stage write a CPU
// profile of its run (from "go" to its last chunk) to
// {prefix}.stage{N}.pprof, for `go tool pprof`: where each stage's CPU
// per chunk goes.
const ProfileEnv = "OMNISHM_DEMO_CPUPROFILE"

// stageConfig is what the parent tells a stage.
type stageConfig struct {
	Stage     int    `json:"stage"`
	KeyPrefix string `json:"key_prefix"` // request r is {KeyPrefix}r{r}: see requestIDs
	Requests  int    `json:"requests"`
	Chunks    int    `json:"chunks"`
	// Connector is every stage's connector configuration, but its stage.
	Connector   config.Connector `json:"connector"`
	IntervalNS  int64            `json:"interval_ns"` // stage 0's pace: one chunk per request per interval (0: all at once)
	Out         string           `json:"out"`
	UpstreamPID int              `json:"upstream_pid"` // the stage this one reads from (0 for stage 0)
}

// event is one JSON line a stage writes on stdout for the parent.
type event struct {
	Event    string `json:"event"` // ready, progress, done, health, error
	Stage    int    `json:"stage"`
	PID      int    `json:"pid,omitempty"`
	Chunks   int    `json:"chunks,omitempty"`   // progress, done: chunks received by stage 2
	Requests int    `json:"requests,omitempty"` // progress, done: requests completed
	P50NS    int64  `json:"p50_ns,omitempty"`   // done: stage-0 send to stage-2 receipt
	P99NS    int64  `json:"p99_ns,omitempty"`
	MaxNS    int64  `json:"max_ns,omitempty"`
	// done: the host clock (internal/hostclock) at stage 0's first send
	// and at stage 2's last receipt.
	FirstSendNS int64             `json:"first_send_ns,omitempty"`
	LastRecvNS  int64             `json:"last_recv_ns,omitempty"`
	Health      *connector.Health `json:"health,omitempty"`
	Reclaimed   int               `json:"reclaimed,omitempty"` // health: undrained chunks released
	Received    *uint64           `json:"received,omitempty"`  // health: payload bytes claimed, where the connector counts them
	CPUNS       int64             `json:"cpu_ns,omitempty"`    // health: the stage's CPU time from "go" to "close"
	Error       string            `json:"error,omitempty"`
}

// stageProcess is one running stage: its connector and the line protocol
// to its parent.
type stageProcess struct {
	cfg      stageConfig
	requests []string
	conn     connector.Receiver
	control  chan string     // lines from the parent; closed when stdin ends
	wavs     []*wavWriter    // stage 2: one per request, opened before "ready"
	checks   []*checkBuffers // stage 2: one per request, made before "ready"
	cpu      time.Duration   // CPU time from "go" to "close"
	// spare are payloads its Sender has put and handed back
	// (SenderOptions.Recycle), for later chunks to reuse. A plain list,
	// not a sync.Pool, which a GC empties: the payloads' memory is then
	// allocated, and faulted in, again. At most the Sender's queue and
	// the stage's senders hold payloads, so it stays bounded.
	spareMu sync.Mutex
	spare   []map[string]any
}

func (p *stageProcess) say(e event) {
	e.Stage = p.cfg.Stage
	b, _ := json.Marshal(e)
	reexec.WriteLine(string(b))
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
// Its failure also goes to stderr, as the stage's own last words.
func runStage(ctx context.Context, args []string) int {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(stageProcs(runtime.NumCPU()))
	}
	p := &stageProcess{control: make(chan string, 4)}
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "omnishm demo: stage: want one argument, its configuration\n")
		return 1
	}
	if err := json.Unmarshal([]byte(args[0]), &p.cfg); err != nil {
		fmt.Fprintf(os.Stderr, "omnishm demo: stage config: %v\n", err)
		return 1
	}
	p.requests = requestIDs(p.cfg.KeyPrefix, p.cfg.Requests)
	if err := p.run(ctx); err != nil {
		p.say(event{Event: "error", Error: err.Error()})
		fmt.Fprintf(os.Stderr, "omnishm demo: stage %d: %s\n", p.cfg.Stage, strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	return 0
}

func (p *stageProcess) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			l, err := reexec.ReadLine()
			if err != nil {
				break
			}
			p.control <- l
		}
		close(p.control)
		cancel() // the parent is gone: stop at once
	}()

	c := p.cfg.Connector
	c.Extra.StageID = p.cfg.Stage
	conn, err := connector.New(c)
	if err != nil {
		return err
	}
	p.conn = conn
	defer conn.Close()

	var up proc.ID // the stage this one reads from: its readers watch it
	if p.cfg.Stage > 0 {
		start, err := proc.StartTime(p.cfg.UpstreamPID)
		if err != nil && !errors.Is(err, proc.ErrNoProcess) {
			return fmt.Errorf("watch stage %d: %w", p.cfg.Stage-1, err)
		}
		// Already gone: start 0 matches no process, so its readers end at once.
		up = proc.ID{PID: p.cfg.UpstreamPID, Start: start}
	}
	if p.cfg.Stage > 0 {
		if err := p.attachUpstream(); err != nil {
			return err
		}
	}
	if p.cfg.Stage < 2 {
		if err := p.warmUp(); err != nil {
			return err
		}
	} else {
		// The output files are setup, like the connector: opening them is
		// no chunk's work.
		defer func() {
			for _, w := range p.wavs {
				w.abort()
			}
		}()
		for _, req := range p.requests {
			w, err := newWAVWriter(filepath.Join(p.cfg.Out, req+".wav"), len(p.requests))
			if err != nil {
				return err
			}
			p.wavs = append(p.wavs, w)
			c, err := newCheckBuffers()
			if err != nil {
				return err
			}
			p.checks = append(p.checks, c)
		}
	}
	var sender *stream.Sender
	if p.cfg.Stage < 2 {
		from, to := strconv.Itoa(p.cfg.Stage), strconv.Itoa(p.cfg.Stage+1)
		opts := stream.SenderOptions{Recycle: func(payload map[string]any) {
			p.spareMu.Lock()
			p.spare = append(p.spare, payload)
			p.spareMu.Unlock()
		}}
		if sender, err = stream.NewSender(p.conn, from, to, opts); err != nil {
			return err
		}
		if err := p.spares(); err != nil {
			return err
		}
	}
	err = p.stream(ctx, sender, up)
	reclaimed := 0
	if sender != nil {
		// Downstream has drained everything by now: a release that
		// reclaims a chunk found one that was never received.
		for _, req := range append(p.requests, warmUpRequest(p.cfg.KeyPrefix)) {
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
	var received *uint64
	if s, ok := conn.(interface{ Stats() connector.Stats }); ok {
		n := s.Stats().ReceivedBytes()
		received = &n
	}
	if err := conn.Close(); err != nil {
		return err
	}
	p.say(event{Event: "health", Health: &h, Reclaimed: reclaimed, Received: received, CPUNS: int64(p.cpu)})
	return nil
}

// stream runs the stage's part of the pipeline: "ready", the warm-up
// stream on "warm", then "warmed" once it is through, the run on "go",
// and waits for "close".
func (p *stageProcess) stream(ctx context.Context, sender *stream.Sender, up proc.ID) error {
	p.say(event{Event: "ready", PID: os.Getpid()})
	if err := p.await(ctx, "warm"); err != nil {
		return err
	}
	warm := []string{warmUpRequest(p.cfg.KeyPrefix)}
	if err := p.pipeline(ctx, sender, up, warm, WarmUpChunks, false); err != nil {
		return fmt.Errorf("warm-up stream: %w", err)
	}
	// A collection, as a stage that has served requests has been through:
	// the run's allocations then reuse the warm-up's freed memory. Before
	// its first collection a fresh process takes every allocation from
	// pages it never touched, each a page fault in the run (about one a
	// chunk in stages 1 and 2, mostly decoded chunks' maps).
	runtime.GC()
	p.say(event{Event: "warmed"})
	if err := p.await(ctx, "go"); err != nil {
		return err
	}
	if os.Getenv(crashEnv) == strconv.Itoa(p.cfg.Stage) {
		self, _ := os.FindProcess(os.Getpid())
		self.Kill()
		select {} // the signal is on its way
	}
	stop, err := startProfile(p.cfg.Stage)
	if err != nil {
		return err
	}
	cpu := cpuTime()
	err = p.pipeline(ctx, sender, up, p.requests, p.cfg.Chunks, true)
	if serr := stop(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	// Until "close": a stage's Sender may still put its last chunks after
	// pipeline returns, and idle waiting costs next to nothing.
	err = p.await(ctx, "close")
	p.cpu = cpuTime() - cpu
	return err
}

// stageProcs is a stage's share of the machine's cores for its Go runtime:
// a third each, at least one. Three runtimes that each ran a thread per
// core on the same cores preempted one another, and handed goroutines
// between threads through futex wakeups, for every chunk (on 2 cores, 20
// alternated default runs: 92 µs of CPU per chunk over the three stages
// with GOMAXPROCS=2, 69 µs with 1). GOMAXPROCS in the environment still
// decides.
func stageProcs(cores int) int { return max(1, cores/3) }

// startProfile starts stage's CPU profile when ProfileEnv asks for one;
// stop ends it and closes the file.
func startProfile(stage int) (stop func() error, err error) {
	prefix := os.Getenv(ProfileEnv)
	if prefix == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(fmt.Sprintf("%s.stage%d.pprof", prefix, stage))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// cpuTime is this process's user and system CPU time so far, every
// thread (0 if the kernel will not say).
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pipeline streams chunks chunks of each of requests through this stage;
// run says it is the run, not the warm-up (stage 2 then writes the WAV
// files and reports).
func (p *stageProcess) pipeline(ctx context.Context, sender *stream.Sender, up proc.ID, requests []string, chunks int, run bool) error {
	switch p.cfg.Stage {
	case 0:
		interval := time.Duration(p.cfg.IntervalNS)
		if !run {
			interval = 0 // the warm-up goes flat out
		}
		return p.produce(ctx, sender, requests, chunks, interval)
	case 1:
		return p.relay(ctx, sender, up, requests)
	case 2:
		return p.collect(ctx, up, requests, chunks, run)
	}
	return fmt.Errorf("no stage %d", p.cfg.Stage)
}

// warmUpRequest is the warm-up stream's request id, under the run's key
// prefix, so the leftover check sees its keys.
func warmUpRequest(keyPrefix string) string { return keyPrefix + "warm" }

// warmUp makes the stage's out edge allocate its ring (SPEC §3: lazily,
// on the first put) before the clock starts, with one put that it retires
// at once: the one-time setup is not a chunk's latency. It counts in the
// stage's Health as one put.
func (p *stageProcess) warmUp() error {
	from := strconv.Itoa(p.cfg.Stage)
	key := warmUpKey(p.requests[0], from)
	if _, _, err := p.conn.Put(from, strconv.Itoa(p.cfg.Stage+1), key, map[string]any{"warm_up": true}); err != nil {
		return fmt.Errorf("warm-up put: %w", err)
	}
	if !p.conn.Cleanup(key) {
		return fmt.Errorf("warm-up key %s was not retired", key)
	}
	return nil
}

// attachUpstream looks once for the upstream stage's warm-up key, which
// is gone: the miss attaches the upstream's ring (SPEC §7), which its
// warm-up made, before the clock starts. The miss counts in no Health.
func (p *stageProcess) attachUpstream() error {
	from := strconv.Itoa(p.cfg.Stage - 1)
	if _, _, ok, err := p.conn.Get(from, strconv.Itoa(p.cfg.Stage), warmUpKey(p.requests[0], from), nil); err != nil || ok {
		return fmt.Errorf("attach stage %s's ring: found %v, %w", from, ok, err)
	}
	return nil
}

// requestIDs are the request ids of a run. They are derived, not passed,
// so a long list never meets the kernel's limit on one environment string.
func requestIDs(keyPrefix string, n int) []string {
	ids := make([]string, n)
	for r := range ids {
		ids[r] = keyPrefix + "r" + strconv.Itoa(r)
	}
	return ids
}

// warmUpKey shares the run's key prefix, so the leftover check sees it.
func warmUpKey(firstRequest, from string) string { return firstRequest + "-warm-up-" + from }

// produce is stage 0: per request, a stream of [1, 28] int64 code chunks,
// the requests interleaved chunk by chunk.
func (p *stageProcess) produce(ctx context.Context, s *stream.Sender, requests []string, chunks int, interval time.Duration) error {
	start := time.Now()
	for n := range chunks {
		if n > 0 && interval > 0 {
			// Pacing, like a model emitting chunks at its own rate; an
			// interrupt must not wait out an interval of up to a minute.
			pace := time.NewTimer(time.Until(start.Add(time.Duration(n) * interval)))
			select {
			case <-pace.C:
			case <-ctx.Done():
				pace.Stop()
				return ctx.Err()
			}
		}
		for r, req := range requests {
			chunk, err := p.payload(newCodesPayload)
			if err != nil {
				return err
			}
			codes, err := tensor.Values[int64](chunk["codes"].(map[string]any)["audio"].(*tensor.Tensor))
			if err != nil {
				return err
			}
			chunkCodesInto(codes, r, n)
			stamp := chunk["demo"].(map[string]any)
			stamp["seq"], stamp["t0_ns"] = n, int64(hostclock.Now())
			send := s.Send
			if n == chunks-1 {
				send = s.Finish
			}
			if err := send(ctx, req, chunk); err != nil {
				return err
			}
		}
	}
	return nil
}

// relay is stage 1: it turns each request's code chunks into audio chunks,
// one goroutine per request, and streams them on to stage 2.
func (p *stageProcess) relay(ctx context.Context, s *stream.Sender, up proc.ID, requests []string) error {
	return perRequest(ctx, requests, func(ctx context.Context, r int, req string) error {
		// Its chunks' stamps travel on in the chunks it sends, which its
		// Sender may still hold after each returns: no recycled memory.
		_, err := readChunks(ctx, p.conn, "0", "1", req, up, nil, func(n int, chunk map[string]any) error {
			_, codes, err := chunkTensor[int64](chunk, "codes", "audio")
			if err == nil && len(codes) != codesPerChunk {
				err = fmt.Errorf("%d codes, want %d", len(codes), codesPerChunk)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", stream.Key(req, "0", n), err)
			}
			out, err := p.payload(newAudioPayload)
			if err != nil {
				return err
			}
			samples, err := tensor.Values[float32](out["audio"].(*tensor.Tensor))
			if err != nil {
				return err
			}
			synthesizeInto(samples, codes, n)
			out["demo"] = chunk["demo"]
			send := s.Send
			if stream.Finished(chunk) {
				send = s.Finish
			}
			return send(ctx, req, out)
		})
		return err
	})
}

// payload is a payload for the stage to send: one its Sender has handed
// back (SenderOptions.Recycle), else a new one. Each chunk's data then goes
// into memory the next chunk overwrites, not fresh memory (and garbage)
// per chunk: 7 KiB of samples for stage 1.
func (p *stageProcess) payload(build func() (map[string]any, error)) (map[string]any, error) {
	p.spareMu.Lock()
	if n := len(p.spare); n > 0 {
		out := p.spare[n-1]
		p.spare[n-1] = nil
		p.spare = p.spare[:n-1]
		p.spareMu.Unlock()
		return out, nil
	}
	p.spareMu.Unlock()
	return build()
}

// spares makes, at setup, the payloads a run keeps in flight at most (the
// Sender's queue and a chunk being made per request, up to twice the
// queue): their memory is allocated and faulted in before the clock
// starts, not by the first chunks. More are made as needed.
func (p *stageProcess) spares() error {
	build := newCodesPayload
	if p.cfg.Stage == 1 {
		build = newAudioPayload
	}
	for range min(stream.DefaultQueueLimit+len(p.requests), 2*stream.DefaultQueueLimit) {
		out, err := build()
		if err != nil {
			return err
		}
		if audio, ok := out["audio"].(*tensor.Tensor); ok {
			clear(audio.Data) // writes: fresh heap memory is not zeroed, nor faulted in, by make
		}
		p.spare = append(p.spare, out)
	}
	return nil
}

// newCodesPayload is stage 0's payload: {"codes": {"audio": [1, 28]
// int64}, "demo": {"seq": n, "t0_ns": its send time}}.
func newCodesPayload() (map[string]any, error) {
	codes, err := tensor.FromSlice(make([]int64, codesPerChunk), 1, codesPerChunk)
	if err != nil {
		return nil, err
	}
	return map[string]any{"codes": map[string]any{"audio": codes}, "demo": map[string]any{}}, nil
}

// newAudioPayload is stage 1's: {"audio": [1, 1792] float32, "demo": stage
// 0's stamps}.
func newAudioPayload() (map[string]any, error) {
	audio, err := tensor.FromSlice(make([]float32, samplesPerChunk), 1, samplesPerChunk)
	if err != nil {
		return nil, err
	}
	return map[string]any{"audio": audio}, nil
}

// collect is stage 2: it checks every audio chunk (once, in order, the
// samples stage 1 must have made from stage 0's codes), writes one WAV file
// per request and reports the latencies.
func (p *stageProcess) collect(ctx context.Context, up proc.ID, requests []string, chunks int, run bool) error {
	var (
		received, completed atomic.Int64
		mu                  sync.Mutex
		latencies           []int64
		firstSend           int64 = math.MaxInt64
		lastRecv            int64
	)
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	if run {
		ticker.Go(func() {
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					p.say(event{Event: "progress", Chunks: int(received.Load()), Requests: int(completed.Load())})
				}
			}
		})
	}
	err := perRequest(ctx, requests, func(ctx context.Context, r int, req string) error {
		var w *wavWriter // none for the warm-up stream
		if run {
			w = p.wavs[r]
		}
		bufs := p.checks[r] // the warm-up's one request uses request 0's
		want, codes, wantBytes := bufs.want, bufs.codes, bufs.wantBytes
		n, err := readChunks(ctx, p.conn, "1", "2", req, up, bufs.room, func(n int, chunk map[string]any) error {
			now := int64(hostclock.Now())
			key := func() string { return stream.Key(req, "1", n) } // for errors only
			demo, _ := chunk["demo"].(map[string]any)
			seq, ok1 := asInt(demo["seq"])
			t0, ok2 := asInt(demo["t0_ns"])
			if !ok1 || !ok2 {
				return fmt.Errorf("%s: no demo stamp in %v", key(), demo)
			}
			if seq != int64(n) {
				return fmt.Errorf("%s: carries chunk %d: lost, duplicated or reordered", key(), seq)
			}
			got, audio, err := chunkTensor[float32](chunk, "audio")
			if err != nil {
				return fmt.Errorf("%s: %w", key(), err)
			}
			if synthesizeInto(want, chunkCodesInto(codes, r, n), n); !bytes.Equal(got.Data, wantBytes.Data) {
				return fmt.Errorf("%s: samples differ from the codes stage 0 sent", key())
			}
			if w != nil {
				if err := w.write(audio); err != nil {
					return err
				}
			}
			received.Add(1)
			mu.Lock()
			latencies = append(latencies, now-t0)
			firstSend, lastRecv = min(firstSend, t0), max(lastRecv, now)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return err
		}
		if n != chunks {
			return fmt.Errorf("request %s: finished after %d chunks, want %d", req, n, chunks)
		}
		if w != nil {
			if err := w.finish(); err != nil {
				return err
			}
		}
		completed.Add(1)
		return nil
	})
	close(stop)
	ticker.Wait()
	if err != nil || !run {
		return err
	}
	slices.Sort(latencies)
	pct := func(q int) int64 { return latencies[(len(latencies)-1)*q/100] }
	p.say(event{Event: "done", Chunks: int(received.Load()), Requests: int(completed.Load()),
		P50NS: pct(50), P99NS: pct(99), MaxNS: latencies[len(latencies)-1],
		FirstSendNS: firstSend, LastRecvNS: lastRecv})
	return nil
}

// readChunks reads request req on edge from->to from its sender up and
// calls each with every chunk in order, the finished one included; it
// returns how many chunks it read. With room set, each chunk's tensors are
// decoded into room, which the next chunk reuses (stream's NextInto): each
// must then keep nothing of its chunk.
func readChunks(ctx context.Context, conn connector.Receiver, from, to, req string, up proc.ID, room []byte, each func(n int, chunk map[string]any) error) (int, error) {
	rd, err := stream.NewReader(conn, from, to, req, stream.ReaderOptions{Sender: up})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	var arena frame.Arena
	for n := 0; ; n++ {
		var chunk map[string]any
		if room != nil {
			arena.Reset(room)
			chunk, err = rd.NextInto(ctx, &arena)
		} else {
			chunk, err = rd.Next(ctx)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if err := each(n, chunk); err != nil {
			return n, err
		}
	}
}

// chunkRoom is the memory a recycled chunk decodes into: an audio chunk's
// samples (7 KiB) and its stamps, with room to spare.
const chunkRoom = 32 << 10

// checkBuffers are the memory stage 2 checks one request's chunks with,
// reused chunk after chunk: the samples chunk n must carry, recomputed in
// place (as its codes are), and their bytes, which the check compares
// bits with (a vectorised memory compare; slices.Equal's float compare
// sample by sample was a tenth of the stage's CPU); and the room its
// chunks decode into.
type checkBuffers struct {
	want      []float32
	codes     []int64
	wantBytes *tensor.Tensor // want's bytes
	room      []byte
}

// newCheckBuffers makes one request's checkBuffers, at setup, with their
// pages written: fresh heap memory is not faulted in by make, and the
// first chunks' faults were the run's.
func newCheckBuffers() (*checkBuffers, error) {
	b := &checkBuffers{want: make([]float32, samplesPerChunk), codes: make([]int64, codesPerChunk), room: make([]byte, chunkRoom)}
	clear(b.want)
	clear(b.room)
	var err error
	b.wantBytes, err = tensor.FromSlice(b.want)
	return b, err
}

// perRequest runs fn for every request concurrently and returns the first
// error; the first failure cancels the others.
func perRequest(ctx context.Context, requests []string, fn func(ctx context.Context, r int, req string) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for r, req := range requests {
		wg.Go(func() {
			if err := fn(ctx, r, req); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// chunkTensor returns the tensor at path in chunk, and its data as a []T.
func chunkTensor[T tensor.Element](chunk map[string]any, path ...string) (*tensor.Tensor, []T, error) {
	var v any = chunk
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("no %v in chunk", path)
		}
		v = m[k]
	}
	t, ok := v.(*tensor.Tensor)
	if !ok {
		return nil, nil, fmt.Errorf("%v is %T, want a tensor", path, v)
	}
	values, err := tensor.Values[T](t)
	return t, values, err
}

// asInt reads an integer as the wire decoder hands it over: an int64, or a
// uint64 for what int64 cannot hold (never a demo stamp).
func asInt(v any) (int64, bool) {
	n, ok := v.(int64)
	return n, ok
}
