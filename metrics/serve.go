//go:build linux

package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ShutdownGrace is how long Serve lets requests in progress finish once
// its context ends.
const ShutdownGrace = 5 * time.Second

// Serve answers HTTP on ln until ctx ends: GET /metrics with what g
// gathers, GET /healthz with "ok". Then it stops accepting, lets requests
// in progress finish for up to ShutdownGrace and returns nil; an error
// means the server failed or could not finish in time. ln is closed when
// Serve returns.
func Serve(ctx context.Context, ln net.Listener, g prometheus.Gatherer) error {
	mux := http.NewServeMux()
	// ContinueOnError: a collector that fails leaves the others' metrics
	// (the state collector reports its own scan failures).
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	failed := make(chan error, 1)
	go func() { failed <- srv.Serve(ln) }()
	select {
	case err := <-failed:
		return fmt.Errorf("metrics: serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("metrics: shut down %s: %w", ln.Addr(), err)
	}
	if err := <-failed; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve %s: %w", ln.Addr(), err)
	}
	return nil
}
