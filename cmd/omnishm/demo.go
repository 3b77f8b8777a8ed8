//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"omnishm/config"
	"omnishm/demo"
	"omnishm/ring"
)

// The demo subcommand: the main job, a three-process audio pipeline over
// omnishm edges (package demo). It prints the stages' pids, a progress bar
// and the figures; it fails when the run lost, duplicated or never
// delivered a chunk, or left anything in /dev/shm. With --transport nats the
// edges go through NATS JetStream: the server of --url (or of --config), or
// one the demo runs in this process.
func init() {
	register(command{
		name: "demo",
		usage: "[--requests N] [--chunks M] [--ring-bytes N] [--out DIR] [--interval D]\n" +
			"       [--transport shm|nats] [--url URL] [--config FILE [--connector NAME]]",
		summary:  "run a three-process audio pipeline over omnishm edges and report its figures",
		examples: []string{"omnishm demo --requests 8 --chunks 32 --out /tmp/wavs", "omnishm demo --ring-bytes 0   # per-key segments only"},
		run:      runDemo,
	})
}

func runDemo(ctx context.Context, args []string, inv *invocation) int {
	fs := inv.flags()
	requests := fs.Int("requests", 8, "concurrent requests")
	chunks := fs.Int("chunks", 32, "chunks per request (each [1, 28] codes, 1792 audio samples)")
	ringBytes := fs.Int("ring-bytes", ring.DefaultCapacity, "host ring capacity per producer and edge: 0 (per-key segments only) or 4096..67108864")
	out := fs.String("out", "", "directory for the WAV files (default: a new temporary directory, kept)")
	interval := fs.Duration("interval", 0, "stage 0 emits one chunk per request every interval (0: all at once, which\n"+
		"measures throughput; the latencies then include queueing behind earlier chunks)")
	tf := declareTransportFlags(fs, true, "default: the configuration's, else a server the demo runs in\n"+
		"this process for the run (a loopback port, JetStream in a temporary directory)")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	set := flagsSet(fs)
	switch {
	case fs.NArg() > 0:
		return inv.usageError("unexpected arguments %s", strings.Join(fs.Args(), " "))
	case *requests < 1 || *requests > demo.MaxRequests:
		return inv.usageError("--requests %d: want 1..%d", *requests, demo.MaxRequests)
	case *chunks < 1 || *chunks > demo.MaxChunks:
		return inv.usageError("--chunks %d: want 1..%d", *chunks, demo.MaxChunks)
	case *requests**chunks > demo.MaxTotalChunks:
		return inv.usageError("--requests x --chunks = %d: want at most %d", *requests**chunks, demo.MaxTotalChunks)
	case ring.CheckCapacity(*ringBytes) != nil:
		return inv.usageError("--ring-bytes %d: want 0 or 4096..67108864", *ringBytes)
	case *interval < 0 || *interval > demo.MaxInterval:
		return inv.usageError("--interval %v: want 0..1m", *interval)
	}
	c, code, ok := tf.chosen(inv, set)
	if !ok {
		return code
	}
	cfg := demo.Config{Requests: *requests, Chunks: *chunks, Interval: *interval, Out: *out, Progress: demoProgress(inv.err)}
	switch {
	case c.Name == config.NatsConnector && set["ring-bytes"]:
		return inv.usageError("--ring-bytes is for --transport %s", transportSHM)
	case c.Name == config.NatsConnector:
		cfg.Nats = &c.Extra.Nats
	case !set["ring-bytes"]:
		// The configuration's ring; its wakeup scope is not used, as every
		// run has a fresh one.
		*ringBytes = c.Extra.HostRingBytes
	}
	cfg.RingBytes, cfg.PerKeyOnly = *ringBytes, *ringBytes == 0
	res, err := demo.Run(ctx, cfg)
	res.WriteReport(inv.out)
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
	fmt.Fprintf(inv.out, "  /dev/shm          clean (scope %s)\n", res.Scope)
	return exitOK
}

// demoProgress prints the stages' pids once they run, then a progress bar
// on one line while stage 2 receives.
func demoProgress(w io.Writer) func(demo.Progress) {
	return func(p demo.Progress) {
		switch p.Phase {
		case demo.Started:
			fmt.Fprintf(w, "omnishm demo: stages running as pids %d %d %d (scope %s)\n", p.PIDs[0], p.PIDs[1], p.PIDs[2], p.Scope)
		case demo.Streaming, demo.Streamed:
			const width = 30
			filled := width * p.Chunks / max(p.Total, 1)
			fmt.Fprintf(w, "\r[%s%s] %d/%d chunks, %d/%d requests", strings.Repeat("#", filled),
				strings.Repeat(".", width-filled), p.Chunks, p.Total, p.Requests, p.AllRequests)
			if p.Phase == demo.Streamed {
				fmt.Fprintln(w)
			}
		case demo.StreamFailed:
			fmt.Fprintln(w)
		}
	}
}
