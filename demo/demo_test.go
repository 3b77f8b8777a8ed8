//go:build linux

package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"omnishm/config"
	"omnishm/internal/shmtest"
)

func TestMain(m *testing.M) { shmtest.Main(m, nil) }

// TestRun runs the pipeline (this test binary as its three stages) and
// checks every WAV file sample by sample against the codes' synthesis.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three stage processes per case")
	}
	for _, c := range []struct {
		cfg  Config
		ring int
	}{
		{Config{Requests: 2, Chunks: 4}, 4 << 20},
		{Config{Requests: 2, Chunks: 4, RingBytes: 4096}, 4096},
		{Config{Requests: 2, Chunks: 4, PerKeyOnly: true}, 0},
		{Config{Requests: 1, Chunks: 1}, 4 << 20},                 // the smallest run: one chunk is also the last
		{Config{Requests: 2, Chunks: 4, Nats: &config.Nats{}}, 0}, // over a server Run embeds
	} {
		name := fmt.Sprintf("ring=%d/%dx%d", c.ring, c.cfg.Requests, c.cfg.Chunks)
		if c.cfg.Nats != nil {
			name = fmt.Sprintf("nats/%dx%d", c.cfg.Requests, c.cfg.Chunks)
		}
		t.Run(name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Out = t.TempDir()
			var phases []Phase
			cfg.Progress = func(p Progress) {
				if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
					phases = append(phases, p.Phase)
				}
				if p.Scope == "" || slices.Contains(p.PIDs[:], 0) {
					t.Errorf("progress %+v", p)
				}
			}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Complete || res.RingBytes != c.ring || res.Received != cfg.Requests*cfg.Chunks || res.Completed != cfg.Requests ||
				(cfg.Nats != nil) != (res.NatsEmbedded && strings.HasPrefix(res.Nats, "nats://127.0.0.1:")) {
				t.Fatalf("result %+v", res)
			}
			if phases[0] != Started || phases[len(phases)-1] != Streamed {
				t.Errorf("phases %v", phases)
			}
			files, _ := filepath.Glob(filepath.Join(cfg.Out, "*.wav"))
			if len(files) != cfg.Requests {
				t.Fatalf("wav files %v, want %d", files, cfg.Requests)
			}
			id := strings.TrimPrefix(res.Scope, "omnishm-demo-")
			for r, req := range requestIDs("demo-"+id+"-", cfg.Requests) {
				b, err := os.ReadFile(filepath.Join(cfg.Out, req+".wav"))
				if err != nil {
					t.Fatal(err)
				}
				n, err := wavSamples(b)
				if err != nil || n != cfg.Chunks*samplesPerChunk {
					t.Fatalf("request %d: %d samples (%v), want %d", r, n, err, cfg.Chunks*samplesPerChunk)
				}
				var want []byte
				for c := range cfg.Chunks {
					want = pcm16(want, synthesize(chunkCodes(r, c), c))
				}
				if !bytes.Equal(b[wavHeaderSize:], want) {
					t.Fatalf("request %d: samples differ from the codes' synthesis", r)
				}
			}
			var report strings.Builder
			res.WriteReport(&report)
			wants := []string{"requests/s", "p50", "p99", "stage 0", "stage 1", "stage 2", res.Scope, "bytes put", "(over streaming)", "cpu per chunk"}
			unwanted := []string{"fallbacks 2", "ring 0 bytes"} // a per-key put is not a failed ring put
			switch {
			case cfg.Nats != nil:
				wants = append(wants, "over NATS at "+res.Nats+" (embedded)", "claims lost 0")
			case c.ring == 0:
				wants = append(wants, "ring off (per-key segments only)", fmt.Sprintf("per-key puts %d (ring off)", cfg.Requests*cfg.Chunks+WarmUpChunks+1), "bytes received")
				unwanted = append(unwanted, "ring puts")
			default:
				wants = append(wants, "ring puts", "per-key puts (ring fallbacks)", "bytes received")
			}
			for _, want := range wants {
				if !strings.Contains(report.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, report.String())
				}
			}
			for _, u := range unwanted {
				if strings.Contains(report.String(), u) {
					t.Errorf("report has %q:\n%s", u, report.String())
				}
			}
			for i, s := range res.Stages {
				if s.CPU <= 0 {
					t.Errorf("stage %d: CPU time %v", i, s.CPU)
				}
			}
			if cfg.Nats == nil {
				for i, s := range res.Stages {
					if s.Received == nil || (*s.Received > 0) != (i > 0) {
						t.Errorf("stage %d received %v bytes", i, s.Received)
					}
				}
			}
		})
	}
}

// TestRunInterrupted: a run whose context ends stops its stages, which
// clean up after themselves, and returns ctx's error itself.
func TestRunInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three stage processes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{Requests: 2, Chunks: 1000000, Out: t.TempDir(), Progress: func(p Progress) {
		if p.Phase == Streaming {
			cancel()
		}
	}}
	res, err := Run(ctx, cfg)
	if err != context.Canceled || res.Complete {
		t.Fatalf("interrupted run: %v, complete %v", err, res.Complete)
	}
}

func TestRunBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Requests: -1}, {Requests: MaxRequests + 1}, {Chunks: -1}, {Chunks: MaxChunks + 1},
		{Requests: MaxRequests, Chunks: MaxChunks}, {Interval: -1}, {Interval: MaxInterval + 1}, {RingBytes: -1},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", cfg, err)
		}
	}
}
