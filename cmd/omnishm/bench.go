package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/bench"
	"omnishm/connector"
	"omnishm/jsonform"
	"omnishm/ring"
	"omnishm/tensor"
	"omnishm/wire"
)

// Transports bench can time. uds is the baseline: the same serialized bytes
// through a Unix-domain socket.
const (
	transportRing   = "ring"
	transportPerKey = "perkey"
	transportUDS    = "uds"
)

// benchReceiverEnv makes `omnishm bench` the receiver half of latency mode:
// the command re-runs its own binary with it set (a hidden role).
const benchReceiverEnv = "OMNISHM_BENCH_RECEIVER"

// benchStopGrace bounds how long an interrupted receiver may take to clean
// up before it is killed.
const benchStopGrace = 10 * time.Second

// Bench edges: numeric stage ids, so the ring and wakeups are used.
const benchFrom, benchTo = "0", "1"

func init() {
	register(command{
		name: "bench",
		usage: "[--mode latency|pair] [--sizes 512,4KiB,64KiB,1MiB | --payload FILE.json] [--count N]\n" +
			"       [--transports ring,perkey,uds] [--ring-bytes N] [--scope S] [--json FILE] [--plot FILE.svg|FILE.png]",
		summary: "time put->get latency and rate per size and transport, against a Unix socket",
		run:     runBench,
	})
}

// benchPlan is what one bench run measures.
type benchPlan struct {
	mode       string
	payloads   []benchPayload
	transports []string
	count      int
	warmup     int
	ringBytes  int
	scope      string
	keyPrefix  string
}

// benchPayload is one payload to time and the size it is reported under.
type benchPayload struct {
	size  int
	value any
	bytes []byte // its msgpack form (SPEC §5), what the uds baseline moves
}

func runBench(ctx context.Context, args []string, inv *invocation) int {
	if os.Getenv(benchReceiverEnv) == "1" {
		return benchReceiver(ctx, inv)
	}
	fs := inv.flags()
	mode := fs.String("mode", "latency", "latency: put here, Recv in a receiver process woken by FIFOs; p50/p99 latency,\n"+
		"msgs/s = 1e6/mean (one message in flight), vs uds = the Unix socket's p50 / this p50.\n"+
		"pair: put then get in this process, mean µs per pair")
	sizes := fs.String("sizes", "512,4KiB,64KiB,1MiB", "payload sizes, float32 tensors of that many bytes (a multiple of 4):\n"+
		"512, 4KiB, 1MiB, 1GiB (binary) or 4KB, 1MB (decimal)")
	payloadFile := fs.String("payload", "", "time this one JSON-form payload (SPEC §10) instead of generated tensors")
	count := fs.Int("count", 1000, "timed messages per size and transport (after a short warm-up)")
	transports := fs.String("transports", "ring,perkey,uds", "comma-separated: ring, perkey, uds (the same msgpack bytes through a\n"+
		"socket). A frame over a quarter of the ring goes per-key: reported as ring->perkey\n"+
		"(ring+perkey when mixed), from the connector's Health counters")
	ringBytes := fs.Int("ring-bytes", ring.DefaultCapacity, "host ring capacity for the ring transport (4096..67108864)")
	jsonPath := fs.String("json", "", `also write the results as JSON to this file ("-": stdout, instead of the table)`)
	scopeName := fs.String("scope", "", "wakeup scope of the run (default: a fresh one per run)")
	plotPath := fs.String("plot", "", "draw p50 latency against size per transport into this .svg or .png file")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return inv.usageError("unexpected arguments %q", fs.Args())
	}
	plan := benchPlan{mode: *mode, count: *count, ringBytes: *ringBytes}
	switch {
	case *mode != "latency" && *mode != "pair":
		return inv.usageError("--mode %q: want latency or pair", *mode)
	case *count < 1:
		return inv.usageError("--count %d: want at least 1", *count)
	case *ringBytes < 4096 || *ringBytes > 64<<20:
		return inv.usageError("--ring-bytes %d: want 4096..67108864 (use --transports perkey for no ring)", *ringBytes)
	}
	if *plotPath != "" {
		if err := bench.CheckPlotPath(*plotPath); err != nil {
			return inv.usageError("--plot: %v", err)
		}
	}
	for _, t := range strings.Split(*transports, ",") {
		switch {
		case t != transportRing && t != transportPerKey && t != transportUDS:
			return inv.usageError("--transports: unknown transport %q (want ring, perkey, uds)", t)
		case slices.Contains(plan.transports, t):
			return inv.usageError("--transports: %q given twice", t)
		}
		plan.transports = append(plan.transports, t)
	}
	sizesSet := false
	fs.Visit(func(f *flag.Flag) { sizesSet = sizesSet || f.Name == "sizes" })
	var err error
	if *payloadFile != "" {
		if sizesSet {
			return inv.usageError("--sizes and --payload exclude each other")
		}
		plan.payloads, err = benchFilePayload(*payloadFile)
	} else {
		var list []int
		if list, err = bench.ParseSizes(*sizes); err != nil {
			return inv.usageError("--sizes: %v", err)
		}
		plan.payloads, err = benchTensorPayloads(list)
		if err != nil {
			return inv.usageError("--sizes: %v", err)
		}
	}
	if err != nil {
		return inv.fail(err)
	}
	plan.warmup = min(plan.count, 20)
	plan.scope = *scopeName
	if plan.scope == "" {
		plan.scope = fmt.Sprintf("omnishm-bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	plan.keyPrefix = fmt.Sprintf("omnishm_bench_%d_", os.Getpid())

	progress := newBenchProgress(inv.err, len(plan.payloads)*len(plan.transports)*(plan.count+plan.warmup))
	report, err := benchRun(ctx, plan, progress, inv)
	progress.finish()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(inv.err, "omnishm bench: interrupted")
			return exitInterrupted
		}
		return inv.fail(err)
	}
	if *jsonPath != "-" {
		report.WriteTable(inv.out)
	}
	if *jsonPath != "" {
		if err := benchWriteJSON(*jsonPath, report, inv.out); err != nil {
			return inv.fail(err)
		}
	}
	if *plotPath != "" {
		if err := bench.Plot(*plotPath, report); err != nil {
			return inv.fail(err)
		}
	}
	return exitOK
}

// benchRun starts the receiver process in latency mode and measures.
func benchRun(ctx context.Context, plan benchPlan, progress *benchProgress, inv *invocation) (bench.Report, error) {
	if plan.mode != "latency" {
		return benchMeasure(ctx, plan, nil, progress, inv)
	}
	peer, err := startBenchReceiver()
	if err != nil {
		return bench.Report{}, err
	}
	defer peer.stop()
	report, err := benchMeasure(ctx, plan, peer, progress, inv)
	if err != nil {
		return report, err
	}
	return report, peer.finish()
}

func benchWriteJSON(path string, r bench.Report, stdout io.Writer) error {
	if path == "-" {
		return r.WriteJSON(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchTensorPayloads makes one float32 tensor payload per size.
func benchTensorPayloads(sizes []int) ([]benchPayload, error) {
	var out []benchPayload
	for _, size := range sizes {
		if size%4 != 0 {
			return nil, fmt.Errorf("%s is not a whole number of float32 values (a multiple of 4)", bench.FormatSize(size))
		}
		values := make([]float32, size/4)
		for i := range values {
			values[i] = float32(i%1000) * 0.5
		}
		t, err := tensor.FromSlice(values, len(values))
		if err != nil {
			return nil, err
		}
		p, err := newBenchPayload(size, map[string]any{"data": t})
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// benchFilePayload reads one JSON-form payload; its size is its msgpack
// form's length.
func benchFilePayload(path string) ([]benchPayload, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := jsonform.Unmarshal(text)
	if err != nil {
		return nil, fmt.Errorf("--payload %s: %w", path, err)
	}
	p, err := newBenchPayload(0, v)
	if err != nil {
		return nil, fmt.Errorf("--payload %s: %w", path, err)
	}
	p.size = len(p.bytes)
	return []benchPayload{p}, nil
}

func newBenchPayload(size int, v any) (benchPayload, error) {
	b, err := wire.Marshal(v)
	if err != nil {
		return benchPayload{}, err
	}
	return benchPayload{size: size, value: v, bytes: b}, nil
}

// benchKey names message i of one (transport, size) run; keys are never
// reused, so a late claim cannot be confused with a later message.
func benchKey(prefix string, run, i int) string {
	return prefix + strconv.Itoa(run) + "_" + strconv.Itoa(i)
}

// benchOpen opens a connector for a bench transport.
func benchOpen(plan benchPlan, transport, stage string) (*connector.SHM, error) {
	opts := connector.DefaultOptions()
	opts.StageID = stage
	opts.WakeupScope = plan.scope
	opts.HostRingBytes = 0
	if transport == transportRing {
		opts.HostRingBytes = plan.ringBytes
	}
	return connector.Open(opts)
}

// benchPath names what actually carried a run's puts, from the producer's
// Health counters before and after it.
func benchPath(transport string, before, after connector.Health) string {
	if transport != transportRing {
		return transport
	}
	ring := after.HostRingPuts - before.HostRingPuts
	fallbacks := after.HostRingFallbacks - before.HostRingFallbacks
	switch {
	case fallbacks == 0:
		return transportRing
	case ring == 0:
		return transportRing + "->" + transportPerKey
	}
	return transportRing + "+" + transportPerKey
}

// benchRequest is one run the parent asks the receiver process to serve.
type benchRequest struct {
	Transport string `json:"transport"`
	Scope     string `json:"scope"`
	RingBytes int    `json:"ring_bytes"`
	KeyPrefix string `json:"key_prefix"`
	Run       int    `json:"run"`
	Messages  int    `json:"messages"`
	Size      int    `json:"size"` // uds: bytes per message
}

// benchMeasure times every transport and payload of the plan. In latency
// mode this process puts and peer, a receiver process, blocks in Recv
// (woken by the FIFOs of SPEC §8) and reports the monotonic time of each
// arrival, which also paces the next put; in pair mode (peer nil) this
// process puts then gets.
func benchMeasure(ctx context.Context, plan benchPlan, peer *benchPeer, progress *benchProgress, inv *invocation) (bench.Report, error) {
	report := bench.Report{Mode: plan.mode}
	run := 0
	for _, transport := range plan.transports {
		results, err := benchTransport(ctx, plan, transport, &run, peer, progress, inv)
		report.Results = append(report.Results, results...)
		if err != nil {
			return report, err
		}
	}
	if peer != nil {
		bench.CompareToUDS(report.Results, transportUDS)
	}
	return report, nil
}

// benchTransport times every payload through one transport.
func benchTransport(ctx context.Context, plan benchPlan, transport string, run *int, peer *benchPeer, progress *benchProgress, inv *invocation) ([]bench.Result, error) {
	var conn *connector.SHM
	if transport != transportUDS {
		var err error
		if conn, err = benchOpen(plan, transport, ""); err != nil {
			return nil, err
		}
		defer conn.Close()
	}
	var out []bench.Result
	for _, p := range plan.payloads {
		*run++
		once, done, err := benchMessenger(plan, transport, conn, peer, p, *run)
		if err != nil {
			return out, err
		}
		var before connector.Health
		lat := make([]time.Duration, 0, plan.count)
		for i := range plan.warmup + plan.count {
			if i == plan.warmup && conn != nil {
				before = conn.Health()
			}
			if err := ctx.Err(); err != nil {
				done()
				return out, err
			}
			d, err := once(i)
			if err != nil {
				done()
				return out, err
			}
			if i >= plan.warmup {
				lat = append(lat, d)
			}
			progress.step(transport, p.size)
		}
		done()
		path := transport
		if conn != nil {
			after := conn.Health()
			if path = benchPath(transport, before, after); path != transport {
				fmt.Fprintf(inv.err, "omnishm bench: %s %s: %d of %d timed puts went per-key (frame over a quarter of the %d-byte ring)\n",
					transport, bench.FormatSize(p.size), after.HostRingFallbacks-before.HostRingFallbacks, plan.count, plan.ringBytes)
			}
		}
		out = append(out, bench.Summarize(path, p.size, lat))
	}
	return out, nil
}

// benchMessenger returns the function that sends message i of one run and
// returns its latency, and the function that ends the run.
func benchMessenger(plan benchPlan, transport string, conn *connector.SHM, peer *benchPeer, p benchPayload, run int) (once func(i int) (time.Duration, error), done func(), err error) {
	done = func() {}
	switch {
	case peer != nil:
		req := benchRequest{Transport: transport, Scope: plan.scope, RingBytes: plan.ringBytes, KeyPrefix: plan.keyPrefix,
			Run: run, Messages: plan.warmup + plan.count, Size: len(p.bytes)}
		if err := peer.request(req); err != nil {
			return nil, nil, err
		}
		send := func(i int) error { return peer.sendUDS(p.bytes) }
		if conn != nil {
			send = func(i int) error {
				_, _, err := conn.Put(benchFrom, benchTo, benchKey(plan.keyPrefix, run, i), p.value)
				return err
			}
		}
		once = func(i int) (time.Duration, error) {
			t0 := benchClock()
			if err := send(i); err != nil {
				return 0, err
			}
			t1, err := peer.arrival()
			return t1 - t0, err
		}
	case conn != nil:
		once = func(i int) (time.Duration, error) {
			t0 := benchClock()
			err := benchPair(conn, benchKey(plan.keyPrefix, run, i), p.value)
			return benchClock() - t0, err
		}
	default:
		loop, err := newUDSLoop(len(p.bytes))
		if err != nil {
			return nil, nil, err
		}
		once = func(int) (time.Duration, error) {
			t0 := benchClock()
			err := loop.roundTrip(p.bytes)
			return benchClock() - t0, err
		}
		done = loop.close
	}
	return once, done, nil
}

// benchPeer is the receiver process of latency mode.
type benchPeer struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	sock  *os.File // this end of the uds baseline's socket pair
	frame []byte
}

func startBenchReceiver() (*benchPeer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	fds, err := benchSocketpair()
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "bench-uds"), os.NewFile(uintptr(fds[1]), "bench-uds-peer")
	defer theirs.Close()
	cmd := exec.Command(exe, "bench")
	cmd.Env = append(os.Environ(), benchReceiverEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs} // fd 3 in the receiver
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = benchChildAttr()
	in, err := cmd.StdinPipe()
	if err != nil {
		mine.Close()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		mine.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("start receiver: %w", err)
	}
	return &benchPeer{cmd: cmd, in: in, out: bufio.NewScanner(out), sock: mine}, nil
}

func (p *benchPeer) request(r benchRequest) error {
	b, _ := json.Marshal(r)
	if _, err := fmt.Fprintf(p.in, "%s\n", b); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	return nil
}

// arrival reads the receiver's next line: the monotonic time a message
// arrived, or its error.
func (p *benchPeer) arrival() (time.Duration, error) {
	if !p.out.Scan() {
		return 0, errors.New("receiver process ended early")
	}
	line := p.out.Text()
	ns, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("receiver: %s", line)
	}
	return time.Duration(ns), nil
}

// sendUDS writes one length-prefixed message to the baseline socket.
func (p *benchPeer) sendUDS(b []byte) error {
	p.frame = binary.LittleEndian.AppendUint64(p.frame[:0], uint64(len(b)))
	p.frame = append(p.frame, b...)
	_, err := p.sock.Write(p.frame)
	return err
}

// finish closes the receiver's stdin (its signal to close and exit) and
// waits for it.
func (p *benchPeer) finish() error {
	p.in.Close()
	p.sock.Close()
	if err := p.cmd.Wait(); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	p.cmd = nil
	return nil
}

// stop ends a receiver that finish did not: an interrupted or failed run.
// It asks first (SIGINT: the receiver's Recv returns and it closes its
// connectors, removing its wake FIFO) and kills it only after
// benchStopGrace, so an interrupted bench leaves /dev/shm clean.
func (p *benchPeer) stop() {
	if p.cmd == nil {
		return
	}
	p.in.Close()
	p.sock.Close()
	p.cmd.Process.Signal(os.Interrupt)
	exited := make(chan struct{})
	go func() {
		p.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(benchStopGrace):
		p.cmd.Process.Kill()
		<-exited
	}
	p.cmd = nil
}

// benchReceiver is the receiver process: it serves the parent's requests
// from stdin until EOF, reporting each arrival time on stdout.
func benchReceiver(ctx context.Context, inv *invocation) int {
	sock := os.NewFile(3, "bench-uds")
	out := bufio.NewWriter(inv.out)
	conns := map[string]*connector.SHM{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	fail := func(err error) int {
		fmt.Fprintf(out, "error: %v\n", err)
		out.Flush()
		return exitFail
	}
	in := bufio.NewScanner(inv.in)
	var buf []byte
	for in.Scan() {
		var req benchRequest
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			return fail(err)
		}
		var conn *connector.SHM
		if req.Transport != transportUDS {
			id := req.Transport + "/" + req.Scope
			if conn = conns[id]; conn == nil {
				plan := benchPlan{scope: req.Scope, ringBytes: req.RingBytes}
				c, err := benchOpen(plan, req.Transport, benchTo)
				if err != nil {
					return fail(err)
				}
				conns[id], conn = c, c
			}
		}
		if cap(buf) < req.Size {
			buf = make([]byte, req.Size)
		}
		for i := range req.Messages {
			if conn != nil {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, _, err := conn.Recv(rctx, benchFrom, benchKey(req.KeyPrefix, req.Run, i))
				cancel()
				if err != nil {
					return fail(err)
				}
			} else if err := readUDS(sock, buf[:req.Size]); err != nil {
				return fail(err)
			}
			out.WriteString(strconv.FormatInt(int64(benchClock()), 10))
			out.WriteByte('\n')
			if err := out.Flush(); err != nil {
				return exitFail
			}
		}
	}
	return exitOK
}

func readUDS(sock *os.File, buf []byte) error {
	var hdr [8]byte
	if _, err := io.ReadFull(sock, hdr[:]); err != nil {
		return err
	}
	if n := binary.LittleEndian.Uint64(hdr[:]); n != uint64(len(buf)) {
		return fmt.Errorf("uds message of %d bytes, want %d", n, len(buf))
	}
	_, err := io.ReadFull(sock, buf)
	return err
}

// benchSocketpair returns a connected stream socket pair, close-on-exec
// (ExtraFiles hands one end to the receiver explicitly).
func benchSocketpair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fds[0])
		unix.CloseOnExec(fds[1])
	}
	return fds, err
}

// benchPair is one put and the get that claims it.
func benchPair(conn *connector.SHM, key string, v any) error {
	if _, _, err := conn.Put(benchFrom, benchTo, key, v); err != nil {
		return err
	}
	_, _, ok, err := conn.Get(benchFrom, benchTo, key, nil)
	if err == nil && !ok {
		err = fmt.Errorf("get %q missed right after its put", key)
	}
	return err
}

// udsLoop is the pair-mode baseline: a socket pair with a reader goroutine,
// since one goroutine cannot write a large message into a socket that
// nobody reads.
type udsLoop struct {
	w, r *os.File
	done chan error
	buf  []byte
}

func newUDSLoop(size int) (*udsLoop, error) {
	fds, err := benchSocketpair()
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	l := &udsLoop{w: os.NewFile(uintptr(fds[0]), "uds-w"), r: os.NewFile(uintptr(fds[1]), "uds-r"), done: make(chan error)}
	go func() {
		defer close(l.done)
		buf := make([]byte, size)
		for {
			err := readUDS(l.r, buf)
			l.done <- err
			if err != nil {
				return
			}
		}
	}()
	return l, nil
}

func (l *udsLoop) roundTrip(b []byte) error {
	l.buf = binary.LittleEndian.AppendUint64(l.buf[:0], uint64(len(b)))
	l.buf = append(l.buf, b...)
	if _, err := l.w.Write(l.buf); err != nil {
		return err
	}
	return <-l.done
}

func (l *udsLoop) close() {
	l.w.Close()
	for range l.done { // up to the reader's EOF
	}
	l.r.Close()
}

// benchProgress draws a progress bar on a terminal, or one line per
// (transport, size) run otherwise.
type benchProgress struct {
	w           io.Writer
	tty         bool
	total, done int
	label       string
	shown       int
}

func newBenchProgress(w io.Writer, total int) *benchProgress {
	f, ok := w.(*os.File)
	return &benchProgress{w: w, tty: ok && benchIsTerminal(f), total: max(total, 1), shown: -1}
}

func (p *benchProgress) step(transport string, size int) {
	p.done++
	label := transport + " " + bench.FormatSize(size)
	if !p.tty {
		if label != p.label {
			p.label = label
			fmt.Fprintf(p.w, "omnishm bench: %s...\n", label)
		}
		return
	}
	const width = 30
	pct := p.done * 100 / p.total
	if pct == p.shown && label == p.label {
		return
	}
	p.shown, p.label = pct, label
	bar := strings.Repeat("#", pct*width/100) + strings.Repeat(".", width-pct*width/100)
	fmt.Fprintf(p.w, "\r[%s] %3d%% %-16s", bar, pct, label)
}

func (p *benchProgress) finish() {
	if p.tty && p.shown >= 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", 60))
	}
}
