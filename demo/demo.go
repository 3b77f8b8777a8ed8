//go:build linux

// Package demo runs omnishm's demonstration pipeline, a small model of a
// vLLM-Omni speech stage chain: three stage processes, each this same
// executable re-run in a role of its own (package internal/reexec),
// connected by omnishm edges in a fresh wakeup scope, or over NATS
// JetStream (package natsconn) when Config.Nats is set:
//
//	stage 0 --codes [1,28] int64--> stage 1 --audio [1,1792] float32--> stage 2 --> {request}.wav
//
// Every request is a chunk stream (package stream) on each edge; stage 2
// recomputes what stages 0 and 1 must have sent and checks every chunk,
// once and in order. Run drives the stages with stdin lines ("go",
// "close"), reads their JSON events on stdout (ready, progress, done,
// health, error), and fails when a chunk was lost, duplicated or reclaimed
// undelivered, or when the run left anything in /dev/shm. No stage
// outlives it: they die with the parent (death signal, closed stdin), and
// Run stops them all when one fails or ctx ends. Each stage reports its
// CPU time (Stage.CPU); with ProfileEnv set, each also writes a CPU profile
// of its run.
//
// It builds on Linux only (build tag linux), as it needs the shared-memory connector.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"omnishm/config"
	"omnishm/internal/reexec"
	"omnishm/natsconn"
	"omnishm/ring"
	"omnishm/scope"
)

// Bounds of a Config.
const (
	MaxRequests = 10000
	MaxChunks   = 1000000
	// MaxTotalChunks bounds Requests x Chunks: stage 2 keeps every chunk's
	// latency for the percentiles.
	MaxTotalChunks = 10_000_000
	MaxInterval    = time.Minute
)

// WarmUpChunks is the length of the warm-up stream, one request that
// goes through every stage before the clock starts: the heap, the code
// paths and the readers' watches of every stage are then warm, as in
// stages that have served requests before. It counts in the stages'
// Health, not in the run's figures.
const WarmUpChunks = 64

// ErrConfig is returned by Run for a Config out of bounds.
var ErrConfig = errors.New("demo: bad configuration")

const (
	startTimeout = 30 * time.Second // for the stages to open their connectors, or to exit
	idleTimeout  = time.Minute      // with no event from any stage (stage 2 reports progress every 50ms)
	stopGrace    = 10 * time.Second // for a stage asked to stop to clean up and exit before it is killed
	shownLeft    = 5                // leftover names an error lists before it counts the rest
)

// Config is one run. The zero Config runs 8 requests of 32 chunks, all at
// once, over rings of the connector's default (4 MiB).
type Config struct {
	Requests int // concurrent requests; 0 means 8
	Chunks   int // chunks per request (each [1, 28] codes, 1792 audio samples); 0 means 32
	// RingBytes is the host ring capacity per producer and edge; 0 means
	// the connector's default (4 MiB).
	RingBytes  int
	PerKeyOnly bool // no rings: per-key segments only
	// Nats, when set, carries the edges over NATS JetStream instead of
	// /dev/shm, with these settings of a NatsConnector. URL "" means a
	// server Run starts in this process for the run
	// (natsconn.StartEmbedded: a loopback port, JetStream in a temporary
	// directory it removes at the end).
	Nats *config.Nats
	// Interval paces stage 0: one chunk per request every Interval (0: all
	// at once, which measures throughput; the latencies then include
	// queueing behind earlier chunks).
	Interval time.Duration
	// Out is the directory for the WAV files, created if need be; empty
	// means a new temporary directory (kept).
	Out string
	// Progress, when set, is called from Run's goroutine as the run goes.
	Progress func(Progress)
}

// Phase is where a run stands when it calls Config.Progress.
type Phase int

const (
	Started      Phase = iota // the stage processes run (PIDs and Scope are set)
	Streaming                 // stage 2 reported its counts, about every 50 ms
	Streamed                  // stage 2 received every request: the final counts
	StreamFailed              // streaming ended early: Run returns an error next
)

// Progress is what Run tells Config.Progress.
type Progress struct {
	Phase Phase
	PIDs  [3]int // the stage processes
	Scope string
	// Chunks and Requests stage 2 received and completed so far, of Total
	// and AllRequests.
	Chunks, Total         int
	Requests, AllRequests int
}

// run is the parent's view of one run.
type run struct {
	cfg       Config
	scope     string
	keyPrefix string // starts every key of the run: demo-{id}-
	requests  []string
	ring      int              // the stages' host ring capacity; 0: none
	conn      config.Connector // the stages' connector, but its stage
	stages    [3]*reexec.Child
	health    [3]*event
	events    chan message
	quit      context.Context // ends when Run returns: the forwarders stop
}

// message is a stage's event, or the end of its stdout (ev nil).
type message struct {
	stage int
	ev    *event
}

func (c Config) resolve() (Config, error) {
	if c.Requests == 0 {
		c.Requests = 8
	}
	if c.Chunks == 0 {
		c.Chunks = 32
	}
	if c.RingBytes == 0 {
		c.RingBytes = ring.DefaultCapacity
	}
	switch {
	case c.Requests < 1 || c.Requests > MaxRequests:
		return c, fmt.Errorf("%w: %d requests (want 1..%d)", ErrConfig, c.Requests, MaxRequests)
	case c.Chunks < 1 || c.Chunks > MaxChunks:
		return c, fmt.Errorf("%w: %d chunks (want 1..%d)", ErrConfig, c.Chunks, MaxChunks)
	case c.Requests*c.Chunks > MaxTotalChunks:
		return c, fmt.Errorf("%w: %d chunks in all (want at most %d)", ErrConfig, c.Requests*c.Chunks, MaxTotalChunks)
	case c.Interval < 0 || c.Interval > MaxInterval:
		return c, fmt.Errorf("%w: interval %v (want 0..%v)", ErrConfig, c.Interval, MaxInterval)
	case c.RingBytes < 0:
		return c, fmt.Errorf("%w: ring of %d bytes", ErrConfig, c.RingBytes)
	}
	return c, nil
}

// Run runs the pipeline once and returns its figures (the caller's). The
// stages run this same executable, which links this package and so has
// their role. The error says what went wrong: a stage failed or did not
// answer, a chunk was lost, duplicated or never received, or the run left
// files in /dev/shm (which Run removed). When ctx ends first, the error is
// ctx.Err() itself, or wraps it when something else went wrong too.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return Result{}, err
	}
	var id [8]byte
	rand.Read(id[:])
	d := &run{
		cfg:       cfg,
		scope:     "omnishm-demo-" + hex.EncodeToString(id[:]),
		keyPrefix: "demo-" + hex.EncodeToString(id[:]) + "-",
		ring:      cfg.RingBytes,
		events:    make(chan message, 64),
	}
	if cfg.PerKeyOnly || cfg.Nats != nil {
		d.ring = 0
	}
	d.requests = requestIDs(d.keyPrefix, cfg.Requests)
	res := Result{Scope: d.scope, Requests: cfg.Requests, Chunks: cfg.Chunks, RingBytes: d.ring, Interval: cfg.Interval, Out: cfg.Out}
	d.conn = config.Connector{Name: config.SharedMemoryConnector,
		Extra: config.Extra{HostRingBytes: d.ring, WakeupScope: d.scope, StageID: config.NoStage}}
	if cfg.Nats != nil {
		n := *cfg.Nats
		if n.URL == "" {
			url, stop, err := natsconn.StartEmbedded("")
			if err != nil {
				return res, fmt.Errorf("demo: %w", err)
			}
			defer stop() // after execute has stopped every stage
			n.URL, res.NatsEmbedded = url, true
		}
		d.conn = config.Connector{Name: config.NatsConnector, Extra: config.Extra{Nats: n, StageID: config.NoStage}}
		res.Nats = n.URL
	}
	if res.Out == "" {
		if res.Out, err = os.MkdirTemp("", "omnishm-demo-"); err != nil {
			return res, err
		}
	} else if err := os.MkdirAll(res.Out, 0o755); err != nil {
		return res, err
	}
	d.cfg.Out = res.Out
	err = d.execute(ctx, &res)
	if left := d.leftovers(); len(left) > 0 {
		for _, n := range left {
			os.RemoveAll(filepath.Join(scope.ShmDir, n))
		}
		leftErr := fmt.Errorf("left %d in /dev/shm (now removed): %s", len(left), shortList(left, shownLeft))
		if err != nil {
			leftErr = fmt.Errorf("%w; %w", err, leftErr)
		}
		err = leftErr
	}
	return res, err
}

func (d *run) progress(p Progress) {
	if d.cfg.Progress == nil {
		return
	}
	for i, c := range d.stages {
		if c != nil {
			p.PIDs[i] = c.Pid()
		}
	}
	p.Scope, p.Total, p.AllRequests = d.scope, len(d.requests)*d.cfg.Chunks, len(d.requests)
	d.cfg.Progress(p)
}

// execute starts the stages, runs the pipeline and fills in res. On any
// failure every stage still running is stopped before it returns.
func (d *run) execute(ctx context.Context, res *Result) error {
	var endForwarding context.CancelFunc
	d.quit, endForwarding = context.WithCancel(context.Background())
	defer endForwarding() // runs after stopAll
	defer d.stopAll()
	launched := time.Now()
	upstream := 0
	// One stage after the other: a stage gets ready once its out edge's
	// ring exists (warmUp) and it has attached its upstream's, so no
	// chunk waits for either.
	for i := range d.stages {
		c, err := d.start(i, upstream)
		if err != nil {
			return fmt.Errorf("start stage %d: %w", i, err)
		}
		d.stages[i] = c
		upstream = c.Pid()
		for ready := false; !ready; {
			m, err := d.next(ctx, startTimeout)
			if err != nil {
				return err
			}
			ready = m.ev.Event == "ready"
		}
	}
	d.progress(Progress{Phase: Started})
	if err := d.tell("warm"); err != nil {
		return err
	}
	for warmed := 0; warmed < len(d.stages); {
		m, err := d.next(ctx, idleTimeout)
		if err != nil {
			return err
		}
		if m.ev.Event == "warmed" {
			warmed++
		}
	}
	start := time.Now()
	res.Setup = start.Sub(launched)
	if err := d.tell("go"); err != nil {
		return err
	}

	var done *event
	for done == nil {
		m, err := d.next(ctx, idleTimeout)
		if err != nil {
			d.progress(Progress{Phase: StreamFailed})
			return err
		}
		switch m.ev.Event {
		case "progress":
			d.progress(Progress{Phase: Streaming, Chunks: m.ev.Chunks, Requests: m.ev.Requests})
		case "done":
			done = m.ev
		}
	}
	res.Elapsed = time.Since(start)
	res.Streaming = time.Duration(done.LastRecvNS - done.FirstSendNS)
	d.progress(Progress{Phase: Streamed, Chunks: done.Chunks, Requests: done.Requests})

	if err := d.tell("close"); err != nil {
		return err
	}
	for waiting := len(d.stages); waiting > 0; {
		m, err := d.next(ctx, idleTimeout)
		if err != nil {
			return err
		}
		if m.ev.Event == "health" {
			d.health[m.stage] = m.ev
			waiting--
		}
	}
	exitBy := time.NewTimer(startTimeout)
	defer exitBy.Stop()
	for i, c := range d.stages {
		select {
		case <-c.Done():
		case <-ctx.Done():
			return fmt.Errorf("stage %d did not exit: %w", i, ctx.Err())
		case <-exitBy.C:
			return fmt.Errorf("stage %d did not exit after reporting", i)
		}
		if err := c.Err(); err != nil {
			return fmt.Errorf("stage %d: %w", i, err)
		}
	}
	res.Complete = true
	res.Received, res.Completed = done.Chunks, done.Requests
	res.P50, res.P99, res.Max = time.Duration(done.P50NS), time.Duration(done.P99NS), time.Duration(done.MaxNS)
	for i, c := range d.stages {
		res.Stages[i] = Stage{PID: c.Pid(), Health: *d.health[i].Health, Reclaimed: d.health[i].Reclaimed, Received: d.health[i].Received,
			CPU: time.Duration(d.health[i].CPUNS)}
	}
	return res.check()
}

// start runs this executable as stage i and forwards its events.
func (d *run) start(i, upstream int) (*reexec.Child, error) {
	cfg, err := json.Marshal(stageConfig{
		Stage: i, KeyPrefix: d.keyPrefix, Requests: len(d.requests), Chunks: d.cfg.Chunks, Connector: d.conn,
		IntervalNS: int64(d.cfg.Interval), Out: d.cfg.Out, UpstreamPID: upstream,
	})
	if err != nil {
		return nil, err
	}
	c, err := reexec.Start(stageRole, reexec.Options{Args: []string{string(cfg)}})
	if err != nil {
		return nil, err
	}
	go d.forward(i, c)
	return c, nil
}

// forward passes stage i's events to d.events, then the end of its stdout,
// until Run returns.
func (d *run) forward(i int, c *reexec.Child) {
	for {
		m := message{stage: i}
		line, err := c.Line(d.quit)
		if err == nil {
			m.ev = &event{}
			if json.Unmarshal([]byte(line), m.ev) != nil {
				m.ev = &event{Event: "error", Error: "bad line: " + line}
			}
		}
		select {
		case d.events <- m:
		case <-d.quit.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// next returns the next stage event, or an error when a stage failed or
// stopped talking, ctx ended, or no event came within timeout.
func (d *run) next(ctx context.Context, timeout time.Duration) (message, error) {
	idle := time.NewTimer(timeout)
	defer idle.Stop()
	for {
		select {
		case m := <-d.events:
			switch {
			case m.ev == nil && d.health[m.stage] != nil:
				continue // a stage that reported its counters may end
			case m.ev == nil:
				c := d.stages[m.stage]
				<-c.Done()
				return m, fmt.Errorf("stage %d ended early: %v", m.stage, c.Err())
			case m.ev.Event == "error":
				return m, d.rootCause(fmt.Errorf("stage %d: %s", m.stage, m.ev.Error), m.stage)
			}
			return m, nil
		case <-ctx.Done():
			return message{}, ctx.Err()
		case <-idle.C:
			return message{}, fmt.Errorf("no word from the stages for %v", timeout)
		}
	}
}

// rootCause names an upstream stage that has died as the cause of err, a
// downstream stage's failure: a stage reports its sender gone after its
// check interval, which can beat the parent to the dead stage's end of
// stdout.
func (d *run) rootCause(err error, stage int) error {
	for j := range stage {
		c := d.stages[j]
		if !c.Exited() {
			continue
		}
		<-c.Done()
		return fmt.Errorf("stage %d ended early: %v (then %w)", j, c.Err(), err)
	}
	return err
}

// tell sends a control line to every stage.
func (d *run) tell(line string) error {
	for i, c := range d.stages {
		if err := c.Send(line); err != nil {
			return fmt.Errorf("tell stage %d %q: %w", i, line, err)
		}
	}
	return nil
}

// stopAll stops and reaps every stage still running: no stage outlives
// the run, whatever happened. Each is asked first (SIGINT and a closed
// stdin: the stage cancels its work and closes its connector, which removes
// what it made) and killed only if still running after stopGrace, so an
// interrupted run leaves /dev/shm clean rather than to the leftover sweep.
func (d *run) stopAll() {
	var wg sync.WaitGroup
	for _, c := range d.stages {
		if c != nil {
			wg.Go(func() { c.Stop(stopGrace) })
		}
	}
	wg.Wait()
}

// leftovers lists what the run left in /dev/shm: its scope's wake
// directory, ring directory and rings, and any per-key segment or lock file
// of its requests.
func (d *run) leftovers() []string {
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
