//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"omnishm/bench"
	"omnishm/jsonform"
	"omnishm/ring"
)

func init() {
	register(command{
		name: "bench",
		usage: "[--mode latency|pair|stream|fanout] [--sizes 512,4KiB,64KiB,1MiB | --payload FILE.json] [--count N]\n" +
			"       [--transports ring,perkey,uds] [--ring-bytes N] [--window N] [--waiters N] [--wait-in recv,reader]\n" +
			"       [--idle DURATION] [--supplied] [--pin] [--scope S] [--url URL | --config FILE [--connector NAME]]\n" +
			"       [--json FILE] [--plot FILE.svg|FILE.png]",
		summary:  "time put->get latency and rate per size and transport, against a Unix socket",
		examples: []string{"omnishm bench --sizes 512,4KiB,64KiB --count 2000 --json bench.json", "omnishm bench --mode pair --sizes 512"},
		run:      runBench,
	})
}

func runBench(ctx context.Context, args []string, inv *invocation) int {
	fs := inv.flags()
	mode := fs.String("mode", "latency", "latency: put here, Recv in a receiver process woken by FIFOs; p50/p99 latency,\n"+
		"msgs/s = 1e6/mean (one message in flight), vs uds = the Unix socket's p50 / this p50,\n"+
		"send µs = the p50 of the put (the socket's write) itself, the sender's part of the latency.\n"+
		"  omnishm bench --sizes 512,4KiB,64KiB --count 2000\n"+
		"pair: put then get in this process, mean µs per pair; beside the floor measured in the\n"+
		"same run, after each pair (flock µs): two uncontended flock pairs on a /dev/shm file\n"+
		"(÷ flock) plus the memcpy row of the same size, two plain copies of the bytes (÷ floor).\n"+
		"  omnishm bench --mode pair --sizes 512,64KiB,1MiB\n"+
		"stream: put N messages with up to --window in flight, a receiver process drains them and\n"+
		"checks each arrived exactly once; msgs/s and MB/s, vs uds = this rate / the socket's.\n"+
		"  omnishm bench --mode stream --sizes 4KiB,1MiB,16MiB --ring-bytes 67108864\n"+
		"fanout: a receiver process blocks --waiters goroutines on keys of their own; its idle\n"+
		"CPU (% of one core) and OS threads, then its CPU per message as this process puts the\n"+
		"keys one by one, also in flock pairs; then the same over pipelined rounds of a key per\n"+
		"waiter, with the garbage collector's part of it (it scans every parked stack) and the\n"+
		"heap allocations per message that set how often it runs.\n"+
		"  omnishm bench --mode fanout --waiters 1000\n"+
		"latency, pair and stream end with a memcpy row per size (two plain copies of the bytes);\n"+
		"latency and pair timing perkey add a shmfile row per size (a fresh /dev/shm file written\n"+
		"and read back, then unlinked: the per-key path's floor); pair and fanout print the flock\n"+
		"floor below the table.")
	sizes := fs.String("sizes", "", "payload sizes, float32 tensors of that many bytes (a multiple of 4):\n"+
		"512, 4KiB, 1MiB, 16MiB (binary) or 4KB, 1MB (decimal) (default 512,4KiB,64KiB,1MiB; fanout 512)")
	payloadFile := fs.String("payload", "", "time this one JSON-form payload (SPEC §10) instead of generated tensors")
	count := fs.Int("count", 0, "timed messages per size and transport, after a short warm-up\n"+
		"(default 1000; stream: 256 MiB worth, 100..20000; fanout: one per waiter)")
	transports := fs.String("transports", "", "comma-separated: ring, perkey, nats (NATS JetStream, see --url), uds (the\n"+
		"same msgpack bytes through a socket). A frame over a quarter of the ring goes per-key:\n"+
		"reported as ring->perkey (ring+perkey when mixed), from the connector's Health counters\n"+
		"(default ring,perkey,nats,uds; fanout ring,perkey)")
	ringBytes := fs.Int("ring-bytes", ring.DefaultCapacity, "host ring capacity for the ring transport (4096..67108864)")
	window := fs.Int("window", 0, "stream: messages in flight at most, lowered to fit half the ring and 64 MiB,\n"+
		"the same for every transport of a size (default 256)")
	waiters := fs.Int("waiters", 0, "fanout: goroutines blocked at once, one key each (default 50, at most 10000)")
	waitIn := fs.String("wait-in", "", "fanout: what the waiters block in, comma-separated: recv (Recv), reader\n"+
		"(stream.Reader.Next) (default recv,reader)")
	idle := fs.Duration("idle", 0, "fanout: the measured idle window, after a quarter of it to settle (default 2s)")
	jsonPath := fs.String("json", "", `also write the results as JSON to this file ("-": stdout, instead of the table)`)
	supplied := fs.Bool("supplied", false, "latency, pair, stream: ring and perkey receive into one recycled buffer\n"+
		"(GetInto/RecvInto with a frame.Arena) instead of memory allocated per message")
	pin := fs.Bool("pin", false, "latency, stream, fanout: run this process on one CPU and the receiver process on\n"+
		"another, so every message crosses CPUs (needs two CPUs)")
	scopeName := fs.String("scope", "", "wakeup scope of the run (default: a fresh one per run)")
	plotPath := fs.String("plot", "", "draw p50 latency (stream: MB/s) against size per transport into this .svg or .png file")
	natsFlags := declareTransportFlags(fs, false, "for the nats transport (default: the configuration's, else a\n"+
		"server bench runs in this process for the run, JetStream in a temporary directory)")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return inv.usageError("unexpected arguments %q", fs.Args())
	}
	set := flagsSet(fs)
	plan := bench.Plan{Mode: bench.Mode(*mode), Count: *count, RingBytes: *ringBytes, Window: *window,
		Waiters: *waiters, Idle: *idle, Scope: *scopeName, Supplied: *supplied, Pin: *pin}
	switch {
	case !slices.Contains(bench.Modes(), plan.Mode):
		return inv.usageError("--mode %q: want one of %v", *mode, bench.Modes())
	case set["count"] && *count < 1:
		return inv.usageError("--count %d: want at least 1", *count)
	case *ringBytes == 0 || ring.CheckCapacity(*ringBytes) != nil:
		return inv.usageError("--ring-bytes %d: want 4096..67108864 (use --transports perkey for no ring)", *ringBytes)
	case *plotPath != "" && plan.Mode == bench.Fanout:
		return inv.usageError("--plot: fanout has no figure per size to plot")
	}
	if *plotPath != "" {
		if err := bench.CheckPlotPath(*plotPath); err != nil {
			return inv.usageError("--plot: %v", err)
		}
	}
	if *transports != "" {
		plan.Transports = strings.Split(*transports, ",")
	}
	if set["url"] || set["config"] || set["connector"] {
		c, code, ok := natsFlags.chosen(inv, set)
		if !ok {
			return code
		}
		plan.Nats = c.Extra.Nats
	}
	if *waitIn != "" {
		plan.WaitIn = strings.Split(*waitIn, ",")
	}
	if *payloadFile != "" {
		if set["sizes"] {
			return inv.usageError("--sizes and --payload exclude each other")
		}
		v, err := readPayloadFile(*payloadFile)
		if err != nil {
			return inv.fail(err)
		}
		plan.Payloads = []bench.Payload{{Value: v}} // reported under its msgpack size
	} else if *sizes != "" {
		list, err := bench.ParseSizes(*sizes)
		if err != nil {
			return inv.usageError("--sizes: %v", err)
		}
		if plan.Payloads, err = bench.TensorPayloads(list); err != nil {
			return inv.usageError("--sizes: %v", err)
		}
	}

	progress := newBenchProgress(inv.err)
	plan.Progress = func(p bench.Progress) {
		if p.Result == nil && p.Fanout == nil {
			progress.step(p)
		} else if p.Result != nil && p.Result.Fallbacks > 0 {
			fmt.Fprintf(inv.err, "omnishm bench: %s %s: %d of %d timed puts went per-key (frame over a quarter of the %d-byte ring)\n",
				p.Transport, bench.FormatSize(p.Size), p.Result.Fallbacks, p.Result.Count, *ringBytes)
		}
	}
	report, err := bench.Run(ctx, plan)
	progress.finish()
	switch {
	case errors.Is(err, bench.ErrPlan):
		return inv.usageError("%v", err)
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(inv.err, "omnishm bench: interrupted")
		return exitInterrupted
	case err != nil:
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

// readPayloadFile reads one JSON-form payload.
func readPayloadFile(path string) (any, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := jsonform.Unmarshal(text)
	if err != nil {
		return nil, fmt.Errorf("--payload %s: %w", path, err)
	}
	return v, nil
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

// benchProgress draws a progress bar on a terminal, or one line per
// (transport, size) run otherwise.
type benchProgress struct {
	w     io.Writer
	tty   bool
	label string
	shown int
}

func newBenchProgress(w io.Writer) *benchProgress {
	f, ok := w.(*os.File)
	return &benchProgress{w: w, tty: ok && benchIsTerminal(f), shown: -1}
}

func (p *benchProgress) step(s bench.Progress) {
	label := s.Transport + " " + bench.FormatSize(s.Size)
	if s.WaitIn != "" {
		label = s.Transport + " " + s.WaitIn + " " + bench.FormatSize(s.Size)
	}
	if !p.tty {
		if label != p.label {
			p.label = label
			fmt.Fprintf(p.w, "omnishm bench: %s...\n", label)
		}
		return
	}
	const width = 30
	pct := s.Done * 100 / max(s.Total, 1)
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
