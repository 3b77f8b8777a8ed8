package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"omnishm/ring"
	"omnishm/scope"
)

// The demo subcommand: the main job. It re-runs its own binary as three
// stage processes (demoStageEnv carries each one's configuration) connected
// by omnishm edges in a fresh wakeup scope:
//
//	stage 0 --codes [1,28] int64--> stage 1 --audio [1,1792] float32--> stage 2 --> {request}.wav
//
// Every request is a chunk stream (package stream) on each edge; stage 2
// recomputes what stages 0 and 1 must have sent and checks every chunk,
// once and in order. The parent drives the stages with stdin lines ("go",
// "close"), reads their JSON events on stdout (ready, progress, done,
// health, error), prints the figures, and fails when a chunk was lost,
// duplicated or reclaimed undelivered, or when the run left anything in
// /dev/shm. No stage outlives it: they die with the parent (death signal,
// closed stdin) and the parent stops them all when one fails or it is
// interrupted.
func init() {
	register(command{
		name:    "demo",
		usage:   "[--requests N] [--chunks M] [--ring-bytes N] [--out DIR] [--interval D]",
		summary: "run a three-process audio pipeline over omnishm edges and report its figures",
		run:     runDemo,
	})
}

const (
	maxDemoChunks    = 10_000_000
	demoStartTimeout = 30 * time.Second // for the stages to open their connectors, or to exit
	demoIdleTimeout  = time.Minute      // with no event from any stage (stage 2 reports progress every 50ms)
	demoStopGrace    = 10 * time.Second // for a stage asked to stop to clean up and exit before it is killed
	demoShownLeft    = 5                // leftover names a report lists before it counts the rest
)

// demoRun is the parent's view of one run.
type demoRun struct {
	scope     string
	keyPrefix string // starts every key of the run: demo-{id}-
	requests  []string
	chunks    int
	ring      int
	interval  time.Duration
	out       string
	stages    [3]*stageChild
	events    chan stageMessage
}

// stageChild is one stage process as the parent sees it.
type stageChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{} // closed once the process is reaped
	err    error         // its exit status, valid after exited
	health *stageEvent
}

// stageMessage is a stage's event, or the end of its stdout (ev nil).
type stageMessage struct {
	stage int
	ev    *stageEvent
}

func runDemo(ctx context.Context, args []string, inv *invocation) int {
	if raw := os.Getenv(demoStageEnv); raw != "" {
		return runStage(ctx, raw, inv)
	}
	fs := inv.flags()
	requests := fs.Int("requests", 8, "concurrent requests")
	chunks := fs.Int("chunks", 32, "chunks per request (each [1, 28] codes, 1792 audio samples)")
	ring := fs.Int("ring-bytes", ring.DefaultCapacity, "host ring capacity per producer and edge: 0 (per-key segments only) or 4096..67108864")
	out := fs.String("out", "", "directory for the WAV files (default: a new temporary directory, kept)")
	interval := fs.Duration("interval", 0, "stage 0 emits one chunk per request every interval (0: all at once, which\n"+
		"measures throughput; the latencies then include queueing behind earlier chunks)")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	switch {
	case fs.NArg() > 0:
		return inv.usageError("unexpected arguments %s", strings.Join(fs.Args(), " "))
	case *requests < 1 || *requests > 10000:
		return inv.usageError("--requests %d: want 1..10000", *requests)
	case *chunks < 1 || *chunks > 1000000:
		return inv.usageError("--chunks %d: want 1..1000000", *chunks)
	case *requests**chunks > maxDemoChunks:
		// Stage 2 keeps every chunk's latency for the percentiles.
		return inv.usageError("--requests x --chunks = %d: want at most %d", *requests**chunks, maxDemoChunks)
	case *ring != 0 && (*ring < 4096 || *ring > 64<<20):
		return inv.usageError("--ring-bytes %d: want 0 or 4096..67108864", *ring)
	case *interval < 0 || *interval > time.Minute:
		return inv.usageError("--interval %v: want 0..1m", *interval)
	}
	var id [8]byte
	rand.Read(id[:])
	run := &demoRun{
		scope:     "omnishm-demo-" + hex.EncodeToString(id[:]),
		keyPrefix: "demo-" + hex.EncodeToString(id[:]) + "-",
		chunks:    *chunks,
		ring:      *ring,
		interval:  *interval,
		out:       *out,
		events:    make(chan stageMessage, 64),
	}
	run.requests = demoRequests(run.keyPrefix, *requests)
	if run.out == "" {
		dir, err := os.MkdirTemp("", "omnishm-demo-")
		if err != nil {
			return inv.fail(err)
		}
		run.out = dir
	} else if err := os.MkdirAll(run.out, 0o755); err != nil {
		return inv.fail(err)
	}
	report, err := run.execute(ctx, inv.err)
	if left := run.leftovers(); len(left) > 0 {
		for _, n := range left {
			os.RemoveAll(filepath.Join(scope.ShmDir, n))
		}
		leftErr := fmt.Errorf("left %d in /dev/shm (now removed): %s", len(left), shortList(left, demoShownLeft))
		if err != nil {
			leftErr = fmt.Errorf("%w; %w", err, leftErr)
		}
		err = leftErr
	}
	fmt.Fprint(inv.out, report)
	if err != nil && ctx.Err() != nil {
		if err == ctx.Err() {
			fmt.Fprintln(inv.err, "omnishm demo: interrupted")
		} else {
			inv.fail(fmt.Errorf("interrupted: %w", err))
		}
		return exitInterrupted
	}
	if err != nil {
		return inv.fail(err)
	}
	fmt.Fprintf(inv.out, "  /dev/shm          clean (scope %s)\n", run.scope)
	return exitOK
}

// execute starts the stages, runs the pipeline and returns the report. On
// any failure every stage still running is stopped before it returns.
func (d *demoRun) execute(ctx context.Context, progress io.Writer) (string, error) {
	defer d.stopAll()
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	launched := time.Now()
	upstream := 0
	for i := range d.stages {
		c, err := d.start(exe, i, upstream)
		if err != nil {
			return "", fmt.Errorf("start stage %d: %w", i, err)
		}
		d.stages[i] = c
		upstream = c.cmd.Process.Pid
	}

	fmt.Fprintf(progress, "omnishm demo: stages running as pids %d %d %d (scope %s)\n",
		d.stages[0].cmd.Process.Pid, d.stages[1].cmd.Process.Pid, d.stages[2].cmd.Process.Pid, d.scope)
	ready := 0
	for ready < len(d.stages) {
		ev, err := d.next(ctx, demoStartTimeout)
		if err != nil {
			return "", err
		}
		if ev.ev.Event == "ready" {
			ready++
		}
	}
	start := time.Now()
	setup := start.Sub(launched)
	if err := d.tell("go"); err != nil {
		return "", err
	}

	total := len(d.requests) * d.chunks
	var done *stageEvent
	for done == nil {
		ev, err := d.next(ctx, demoIdleTimeout)
		if err != nil {
			fmt.Fprintln(progress)
			return "", err
		}
		switch ev.ev.Event {
		case "progress":
			drawProgress(progress, ev.ev.Chunks, total, ev.ev.Requests, len(d.requests))
		case "done":
			done = ev.ev
		}
	}
	elapsed := time.Since(start)
	drawProgress(progress, done.Chunks, total, done.Requests, len(d.requests))
	fmt.Fprintln(progress)

	if err := d.tell("close"); err != nil {
		return "", err
	}
	for waiting := len(d.stages); waiting > 0; {
		ev, err := d.next(ctx, demoIdleTimeout)
		if err != nil {
			return "", err
		}
		if ev.ev.Event == "health" {
			d.stages[ev.stage].health = ev.ev
			waiting--
		}
	}
	exitBy := time.After(demoStartTimeout)
	for i, c := range d.stages {
		select {
		case <-c.exited:
		case <-ctx.Done():
			return "", fmt.Errorf("stage %d did not exit: %w", i, ctx.Err())
		case <-exitBy:
			return "", fmt.Errorf("stage %d did not exit after reporting", i)
		}
		if c.err != nil {
			return "", fmt.Errorf("stage %d: %w", i, c.err)
		}
	}
	return d.report(setup, elapsed, done)
}

// start runs the demo's own binary as stage i.
func (d *demoRun) start(exe string, i, upstream int) (*stageChild, error) {
	cfg, err := json.Marshal(stageConfig{
		Stage: i, Scope: d.scope, KeyPrefix: d.keyPrefix, Requests: len(d.requests), Chunks: d.chunks, RingBytes: d.ring, IntervalNS: int64(d.interval),
		Out: d.out, UpstreamPID: upstream, ParentPID: os.Getpid(),
	})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "demo")
	cmd.Env = append(os.Environ(), demoStageEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &stageChild{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	lines := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev stageEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				ev = stageEvent{Event: "error", Error: "bad line: " + sc.Text()}
			}
			d.events <- stageMessage{stage: i, ev: &ev}
		}
		close(lines)
		d.events <- stageMessage{stage: i}
	}()
	go func() {
		<-lines // Wait closes stdout: read it all first
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// next returns the next stage event, or an error when a stage failed or
// stopped talking, ctx ended, or no event came within timeout.
func (d *demoRun) next(ctx context.Context, timeout time.Duration) (stageMessage, error) {
	idle := time.NewTimer(timeout)
	defer idle.Stop()
	for {
		select {
		case m := <-d.events:
			switch {
			case m.ev == nil && d.stages[m.stage].health != nil:
				continue // a stage that reported its counters may end
			case m.ev == nil:
				c := d.stages[m.stage]
				<-c.exited
				return m, fmt.Errorf("stage %d ended early: %v", m.stage, c.err)
			case m.ev.Event == "error":
				return m, d.rootCause(fmt.Errorf("stage %d: %s", m.stage, m.ev.Error), m.stage)
			}
			return m, nil
		case <-ctx.Done():
			return stageMessage{}, ctx.Err()
		case <-idle.C:
			return stageMessage{}, fmt.Errorf("no word from the stages for %v", timeout)
		}
	}
}

// rootCause names an upstream stage that has died as the cause of err, a
// downstream stage's failure: a stage reports its sender gone after its
// check interval, which can beat the parent to the dead stage's end of
// stdout.
func (d *demoRun) rootCause(err error, stage int) error {
	for j := range stage {
		c := d.stages[j]
		if !hasExited(c) {
			continue
		}
		<-c.exited
		return fmt.Errorf("stage %d ended early: %v (then %w)", j, c.err, err)
	}
	return err
}

// hasExited reports whether a stage process has ended, reaped or not.
func hasExited(c *stageChild) bool {
	select {
	case <-c.exited:
		return true
	default:
		return childExited(c.cmd.Process.Pid)
	}
}

// tell sends a control line to every stage.
func (d *demoRun) tell(line string) error {
	for i, c := range d.stages {
		if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
			return fmt.Errorf("tell stage %d %q: %w", i, line, err)
		}
	}
	return nil
}

// stopAll stops and reaps every stage still running: no stage outlives
// the demo, whatever happened. It asks first (SIGINT and a closed stdin:
// the stage cancels its work and closes its connector, which removes what
// it made) and kills only the stages still running after demoStopGrace, so
// an interrupted run leaves /dev/shm clean rather than to the parent's
// sweep.
func (d *demoRun) stopAll() {
	var running []*stageChild
	for _, c := range d.stages {
		if c == nil {
			continue
		}
		select {
		case <-c.exited:
			continue
		default:
		}
		c.cmd.Process.Signal(os.Interrupt)
		c.stdin.Close()
		running = append(running, c)
	}
	grace := time.NewTimer(demoStopGrace)
	defer grace.Stop()
	for _, c := range running {
		for waiting := true; waiting; {
			select {
			case <-c.exited:
				waiting = false
			case <-d.events: // drained, so the stdout readers can finish and Wait return
			case <-grace.C:
				for _, c := range running {
					c.cmd.Process.Kill()
				}
			}
		}
	}
}

// leftovers lists what the run left in /dev/shm: its scope's wake
// directory, ring directory and rings, and any per-key segment or lock file
// of its requests.
func (d *demoRun) leftovers() []string {
	names := scope.New(d.scope)
	entries, err := os.ReadDir(scope.ShmDir)
	if err != nil {
		return nil
	}
	var left []string
	for _, e := range entries {
		n := e.Name()
		if n == filepath.Base(names.WakeDir) || n == names.RingDirName || strings.HasPrefix(n, names.RingPrefix()) ||
			strings.HasPrefix(n, d.keyPrefix) || strings.HasPrefix(n, "shm_"+d.keyPrefix) {
			left = append(left, n)
		}
	}
	return left
}

// shortList joins the first n names and counts the rest: a run killed
// mid-stream can leave thousands of segments.
func shortList(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, " ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], " "), len(names)-n)
}

func drawProgress(w io.Writer, chunks, total, requests, allRequests int) {
	const width = 30
	filled := width * chunks / max(total, 1)
	fmt.Fprintf(w, "\r[%s%s] %d/%d chunks, %d/%d requests", strings.Repeat("#", filled),
		strings.Repeat(".", width-filled), chunks, total, requests, allRequests)
}

// report formats the run's figures.
func (d *demoRun) report(setup, elapsed time.Duration, done *stageEvent) (string, error) {
	var b strings.Builder
	total := len(d.requests) * d.chunks
	pace := "all chunks at once"
	if d.interval > 0 {
		pace = fmt.Sprintf("one chunk per request every %v", d.interval)
	}
	fmt.Fprintf(&b, "omnishm demo: %d requests x %d chunks (%s), ring %d bytes, 3 stage processes\n", len(d.requests), d.chunks, pace, d.ring)
	fmt.Fprintf(&b, "  scope             %s\n", d.scope)
	fmt.Fprintf(&b, "  setup             %.3f s (start the stages, open connectors, warm up the rings)\n", setup.Seconds())
	fmt.Fprintf(&b, "  elapsed           %.3f s\n", elapsed.Seconds())
	fmt.Fprintf(&b, "  requests/s        %.1f\n", float64(len(d.requests))/elapsed.Seconds())
	fmt.Fprintf(&b, "  chunks/s          %.0f\n", float64(total)/elapsed.Seconds())
	fmt.Fprintf(&b, "  chunk latency     p50 %s  p99 %s  max %s (stage-0 send to stage-2 receipt)\n",
		ms(done.P50NS), ms(done.P99NS), ms(done.MaxNS))
	var errs []error
	for i, c := range d.stages {
		h := c.health.Health
		fmt.Fprintf(&b, "  stage %d health    puts %d  gets %d  bytes %d  ring puts %d  ring gets %d  fallbacks %d  reclaimed %d\n",
			i, h.Puts, h.Gets, h.BytesTransferred, h.HostRingPuts, h.HostRingGets, h.HostRingFallbacks, c.health.Reclaimed)
		if c.health.Reclaimed != 0 {
			errs = append(errs, fmt.Errorf("stage %d: %d chunks were never received", i, c.health.Reclaimed))
		}
	}
	if done.Chunks != total || done.Requests != len(d.requests) {
		errs = append(errs, fmt.Errorf("stage 2 received %d of %d chunks, %d of %d requests", done.Chunks, total, done.Requests, len(d.requests)))
	}
	// Every chunk is put once by stage 0 and once by stage 1, and got once
	// by stage 1 and once by stage 2; stages 0 and 1 also made one warm-up put.
	for i, want := range []struct{ puts, gets int }{{total + 1, 0}, {total + 1, total}, {0, total}} {
		h := d.stages[i].health.Health
		if int(h.Puts) != want.puts || int(h.Gets) != want.gets {
			errs = append(errs, fmt.Errorf("stage %d: %d puts and %d gets, want %d and %d", i, h.Puts, h.Gets, want.puts, want.gets))
		}
	}
	fmt.Fprintf(&b, "  wav files         %d in %s (16-bit PCM, mono, %d Hz, %d samples each)\n",
		len(d.requests), d.out, sampleRate, d.chunks*samplesPerChunk)
	return b.String(), errors.Join(errs...)
}

func ms(ns int64) string { return fmt.Sprintf("%.3f ms", float64(ns)/1e6) }
