//go:build linux

// Package metrics exports omnishm's figures to Prometheus
// (github.com/prometheus/client_golang):
//
//   - Collector: one connector's per-edge counters (puts, gets and bytes by
//     path, ring fallbacks by reason), its put-latency and receive-wait
//     histograms, its receive waiters, and the occupancy of the rings it
//     produces into. Register adds one to a registry in one call.
//   - StateCollector: one user's shared-memory state as package shmstate
//     scans it at each scrape (rings per scope with producer liveness,
//     occupancy and the age of the oldest ready frame, markers without
//     rings, segments, lock files, FIFOs, orphan candidates). It never
//     waits on a lock. `omnishm exporter` serves it.
//   - Serve: /metrics and /healthz over HTTP until a context ends.
//
// Names follow Prometheus conventions: the omnishm_ prefix, units in the
// names (_bytes, _seconds), _total for counters. Labels are bounded: edges
// (from, to; a connector counts at most connector.MaxStatsEdges), paths,
// reasons, stages and ring files, never a key or a request id.
//
// Metrics never touches the hot path itself: a Collector reads
// connector.SHM.Stats, a snapshot of lock-free counters, when scraped.
//
// It builds on Linux only (build tag linux), as it needs packages connector and shmstate.
package metrics
