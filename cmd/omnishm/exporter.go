//go:build linux

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"omnishm/metrics"
)

func init() {
	register(command{
		name:     "exporter",
		usage:    "[--listen ADDR] [--scope S | --all] [--key-prefix P]",
		summary:  "serve this user's /dev/shm state as Prometheus metrics on /metrics (read-only; /healthz too)",
		examples: []string{"omnishm exporter --listen 127.0.0.1:9477 --all"},
		run:      runExporter,
	})
}

// defaultListen is the exporter's address without --listen: loopback only,
// since scope names and stage ids are the deployment's.
const defaultListen = "127.0.0.1:9477"

func runExporter(ctx context.Context, args []string, inv *invocation) int {
	fs := inv.flags()
	sel := declareScopeFlags(fs)
	listen := fs.String("listen", defaultListen, "address to serve on (host:port; port 0 picks a free one, printed at start)")
	runtime := fs.Bool("runtime-metrics", true, "also export the exporter's own Go runtime and process metrics")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return inv.usageError("unexpected arguments %q", fs.Args())
	}
	opts, code, ok := sel.options(inv)
	if !ok {
		return code
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewStateCollector(opts))
	if *runtime {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return inv.fail(err)
	}
	fmt.Fprintf(inv.out, "serving http://%s/metrics\n", ln.Addr())
	if err := metrics.Serve(ctx, ln, reg); err != nil {
		return inv.fail(err)
	}
	return exitOK
}
