package main

import (
	"context"
	"flag"
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
		usage: "[--mode latency|pair] [--sizes 512,4KiB,64KiB,1MiB | --payload FILE.json] [--count N]\n" +
			"       [--transports ring,perkey,uds] [--ring-bytes N] [--scope S] [--json FILE] [--plot FILE.svg|FILE.png]",
		summary: "time put->get latency and rate per size and transport, against a Unix socket",
		run:     runBench,
	})
}

func runBench(ctx context.Context, args []string, inv *invocation) int {
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
	plan := bench.Plan{Mode: bench.Mode(*mode), Count: *count, RingBytes: *ringBytes, Scope: *scopeName}
	switch {
	case !slices.Contains(bench.Modes(), plan.Mode):
		return inv.usageError("--mode %q: want latency or pair", *mode)
	case *count < 1:
		return inv.usageError("--count %d: want at least 1", *count)
	case *ringBytes == 0 || ring.CheckCapacity(*ringBytes) != nil:
		return inv.usageError("--ring-bytes %d: want 4096..67108864 (use --transports perkey for no ring)", *ringBytes)
	}
	if *plotPath != "" {
		if err := bench.CheckPlotPath(*plotPath); err != nil {
			return inv.usageError("--plot: %v", err)
		}
	}
	for _, t := range strings.Split(*transports, ",") {
		switch {
		case !slices.Contains(bench.Transports(), t):
			return inv.usageError("--transports: unknown transport %q (want ring, perkey, uds)", t)
		case slices.Contains(plan.Transports, t):
			return inv.usageError("--transports: %q given twice", t)
		}
		plan.Transports = append(plan.Transports, t)
	}
	sizesSet := false
	fs.Visit(func(f *flag.Flag) { sizesSet = sizesSet || f.Name == "sizes" })
	if *payloadFile != "" {
		if sizesSet {
			return inv.usageError("--sizes and --payload exclude each other")
		}
		v, err := readPayloadFile(*payloadFile)
		if err != nil {
			return inv.fail(err)
		}
		plan.Payloads = []bench.Payload{{Value: v}} // reported under its msgpack size
	} else {
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
		if p.Result == nil {
			progress.step(p)
		} else if n := p.Result.Fallbacks; n > 0 {
			fmt.Fprintf(inv.err, "omnishm bench: %s %s: %d of %d timed puts went per-key (frame over a quarter of the %d-byte ring)\n",
				p.Transport, bench.FormatSize(p.Size), n, p.Result.Count, *ringBytes)
		}
	}
	report, err := bench.Run(ctx, plan)
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
