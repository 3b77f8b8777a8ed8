//go:build linux

package demo

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"omnishm/connector"
)

// Result is a run's figures.
type Result struct {
	Scope     string
	Requests  int
	Chunks    int // per request
	RingBytes int // 0: per-key segments only (and over NATS)
	// Nats is the server the edges went through, when they did: its URL,
	// and whether Run embedded it.
	Nats         string
	NatsEmbedded bool
	Interval     time.Duration
	Out          string // where the WAV files are, one per request: {request}.wav
	// Complete says the pipeline ran to its end and every stage reported:
	// the fields below are set.
	Complete bool
	// Setup is the time to start the stages, open connectors and the WAV
	// files, warm up the rings and run the warm-up stream (WarmUpChunks).
	Setup time.Duration
	// Elapsed is the parent's time from "go" to stage 2's report that it
	// received every chunk: Streaming and the control lines to and from
	// the stages.
	Elapsed time.Duration
	// Streaming is the pipeline's time on the host clock, from stage 0's
	// first send to stage 2's last receipt: what chunks/s and requests/s
	// are over.
	Streaming time.Duration
	// Received and Completed are the chunks and requests stage 2 got.
	Received, Completed int
	P50, P99, Max       time.Duration // chunk latency, stage-0 send to stage-2 receipt
	Stages              [3]Stage
}

// Stage is what a stage process reported at its end.
type Stage struct {
	PID       int
	Health    connector.Health
	Reclaimed int // chunks it had sent that were never received
	// Received is the payload bytes it claimed, where its connector counts
	// them (Health's BytesTransferred counts only puts, as SPEC §9 does);
	// nil where it does not.
	Received *uint64
	// CPU is the stage process's user and system CPU time from "go" to
	// the end of the run: its work for the run's chunks, every thread.
	CPU time.Duration
}

// check finds what a complete run's counts say went wrong.
func (r *Result) check() error {
	var errs []error
	total := r.Requests * r.Chunks
	for i, s := range r.Stages {
		if s.Reclaimed != 0 {
			errs = append(errs, fmt.Errorf("stage %d: %d chunks were never received", i, s.Reclaimed))
		}
	}
	if r.Received != total || r.Completed != r.Requests {
		errs = append(errs, fmt.Errorf("stage 2 received %d of %d chunks, %d of %d requests", r.Received, total, r.Completed, r.Requests))
	}
	// Every chunk is put once by stage 0 and once by stage 1, and got once
	// by stage 1 and once by stage 2, and so is every chunk of the warm-up
	// stream; stages 0 and 1 also made one warm-up put.
	all := total + WarmUpChunks
	for i, want := range []struct{ puts, gets int }{{all + 1, 0}, {all + 1, all}, {0, all}} {
		h := r.Stages[i].Health
		if int(h.Puts) != want.puts || int(h.Gets) != want.gets {
			errs = append(errs, fmt.Errorf("stage %d: %d puts and %d gets, want %d and %d", i, h.Puts, h.Gets, want.puts, want.gets))
		}
	}
	return errors.Join(errs...)
}

// WriteReport writes a complete run's figures, one per line (nothing for
// a run that is not Complete).
func (r Result) WriteReport(w io.Writer) error {
	if !r.Complete {
		return nil
	}
	var b strings.Builder
	total := r.Requests * r.Chunks
	pace := "all chunks at once"
	if r.Interval > 0 {
		pace = fmt.Sprintf("one chunk per request every %v", r.Interval)
	}
	edges := fmt.Sprintf("ring %d bytes", r.RingBytes)
	switch {
	case r.Nats == "" && r.RingBytes == 0:
		edges = "ring off (per-key segments only)"
	case r.Nats != "":
		edges = "over NATS at " + r.Nats
		if r.NatsEmbedded {
			edges += " (embedded)"
		}
	}
	fmt.Fprintf(&b, "omnishm demo: %d requests x %d chunks (%s), %s, 3 stage processes\n", r.Requests, r.Chunks, pace, edges)
	fmt.Fprintf(&b, "  scope             %s\n", r.Scope)
	fmt.Fprintf(&b, "  setup             %.3f s (start the stages, open connectors and WAV files, warm up the rings, a %d-chunk warm-up stream)\n", r.Setup.Seconds(), WarmUpChunks)
	fmt.Fprintf(&b, "  elapsed           %.3f s (go to done)\n", r.Elapsed.Seconds())
	fmt.Fprintf(&b, "  streaming         %.3f s (stage 0's first send to stage 2's last receipt)\n", r.Streaming.Seconds())
	over, what := r.Streaming, "streaming"
	if over <= 0 { // no host-clock stamps came back: the parent's time
		over, what = r.Elapsed, "elapsed"
	}
	fmt.Fprintf(&b, "  requests/s        %.1f\n", float64(r.Requests)/over.Seconds())
	fmt.Fprintf(&b, "  chunks/s          %.0f (over %s)\n", float64(total)/over.Seconds(), what)
	fmt.Fprintf(&b, "  chunk latency     p50 %s  p99 %s  max %s (stage-0 send to stage-2 receipt)\n", ms(r.P50), ms(r.P99), ms(r.Max))
	for i, s := range r.Stages {
		h := s.Health
		// Health counts as SPEC §9 does: bytes are what the stage put, and
		// every put that did not take the ring is a fallback, all of them
		// with the ring off. The labels say so.
		fmt.Fprintf(&b, "  stage %d health    puts %d  gets %d  bytes put %d", i, h.Puts, h.Gets, h.BytesTransferred)
		if s.Received != nil {
			fmt.Fprintf(&b, "  bytes received %d", *s.Received)
		}
		switch {
		case r.Nats != "":
			fmt.Fprintf(&b, "  object puts %d  object gets %d  claims lost %d  reconnects %d",
				h.RemoteObjectPuts, h.RemoteObjectGets, h.RemoteClaimsLost, h.RemoteReconnects)
		case r.RingBytes == 0:
			fmt.Fprintf(&b, "  per-key puts %d (ring off)", h.HostRingFallbacks)
		default:
			fmt.Fprintf(&b, "  ring puts %d  ring gets %d  per-key puts (ring fallbacks) %d", h.HostRingPuts, h.HostRingGets, h.HostRingFallbacks)
		}
		fmt.Fprintf(&b, "  reclaimed %d\n", s.Reclaimed)
	}
	fmt.Fprintf(&b, "  cpu per chunk    ")
	for i, s := range r.Stages {
		fmt.Fprintf(&b, " stage %d %.1f µs", i, float64(s.CPU)/float64(time.Microsecond)/float64(max(total, 1)))
	}
	fmt.Fprintf(&b, " (user+system, go to done; on %d cores)\n", runtime.NumCPU())
	fmt.Fprintf(&b, "  wav files         %d in %s (16-bit PCM, mono, %d Hz, %d samples each)\n",
		r.Requests, r.Out, sampleRate, r.Chunks*samplesPerChunk)
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }
