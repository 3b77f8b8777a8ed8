package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// benchJSON runs bench with --json and returns the parsed results, checking
// the exact shape scripts rely on.
func benchJSON(t *testing.T, mode string, args ...string) []map[string]any {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bench.json")
	r := omnishm(t, nil, append([]string{"bench", "--mode", mode, "--scope", opsScope(t), "--json", out}, args...)...)
	if r.code != 0 {
		t.Fatalf("bench: %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Mode    string           `json:"mode"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &report); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, b)
	}
	var top map[string]any
	json.Unmarshal(b, &top)
	if len(top) != 2 || report.Mode != mode {
		t.Fatalf("report %s", b)
	}
	want := []string{"bytes_per_s", "count", "mean_us", "msgs_per_s", "p50_us", "p99_us", "size", "transport", "vs_uds"}
	for _, res := range report.Results {
		var keys []string
		for k := range res {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			t.Errorf("result keys %v, want %v", keys, want)
		}
		if res["p50_us"].(float64) <= 0 || res["msgs_per_s"].(float64) <= 0 || res["p99_us"].(float64) < res["p50_us"].(float64) {
			t.Errorf("result %v", res)
		}
	}
	if lines := strings.Count(string(r.stdout), "\n"); lines != len(report.Results)+1 {
		t.Errorf("table has %d lines for %d results:\n%s", lines, len(report.Results), r.stdout)
	}
	return report.Results
}

type benchRow struct {
	transport string
	size      float64
}

func rows(results []map[string]any) []benchRow {
	var out []benchRow
	for _, r := range results {
		out = append(out, benchRow{r["transport"].(string), r["size"].(float64)})
	}
	return out
}

func TestBenchLatency(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "lat.svg")
	res := benchJSON(t, "latency", "--count", "3", "--sizes", "512,4KiB", "--transports", "ring,perkey,uds", "--plot", plot)
	want := []benchRow{{"ring", 512}, {"ring", 4096}, {"perkey", 512}, {"perkey", 4096}, {"uds", 512}, {"uds", 4096}}
	if got := rows(res); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for _, r := range res {
		if r["count"].(float64) != 3 || r["vs_uds"] == nil || r["vs_uds"].(float64) <= 0 {
			t.Errorf("result %v", r)
		}
		if r["transport"] == "uds" && r["vs_uds"].(float64) != 1 {
			t.Errorf("uds against itself: %v", r)
		}
	}
	if b, err := os.ReadFile(plot); err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("plot: %v", err)
	}
}

func TestBenchPair(t *testing.T) {
	// A 2KiB tensor's frame is over a quarter of a 4096-byte ring: the
	// report says it went per-key.
	res := benchJSON(t, "pair", "--count", "4", "--sizes", "512,2KiB", "--ring-bytes", "4096", "--transports", "ring,uds")
	want := []benchRow{{"ring", 512}, {"ring->perkey", 2048}, {"uds", 512}, {"uds", 2048}}
	if got := rows(res); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for _, r := range res {
		if r["vs_uds"] != nil {
			t.Errorf("pair mode has vs_uds: %v", r)
		}
	}
	payload := filepath.Join(vectors, "tree_float32.json")
	res = benchJSON(t, "pair", "--count", "2", "--payload", payload, "--transports", "perkey")
	if len(res) != 1 || res[0]["transport"] != "perkey" || res[0]["size"].(float64) < 100 {
		t.Errorf("--payload results %v", res)
	}
}

// TestBenchInterrupted: SIGINT mid-run stops the receiver process too,
// which removes its wake FIFO: the scope is left empty, and the status is 130.
func TestBenchInterrupted(t *testing.T) {
	s := opsScope(t)
	p := startCLI(t, nil, "bench", "--mode", "latency", "--scope", s, "--count", "10000000", "--sizes", "512", "--transports", "ring")
	shmtest.Eventually(t, patience, "the bench to start timing", func() bool {
		return strings.Contains(p.errText(), "omnishm bench: ring 512...")
	})
	p.signal(syscall.SIGINT)
	if code := p.wait(t); code != exitInterrupted {
		t.Fatalf("bench exited %d after SIGINT, want %d; stderr %q", code, exitInterrupted, p.errText())
	}
	names := scope.New(s)
	var left []string
	for _, dir := range []string{names.WakeDir, names.RingDir()} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			left = append(left, filepath.Join(dir, e.Name()))
		}
	}
	if rings, _ := filepath.Glob(filepath.Join(scope.ShmDir, names.RingPrefix()+"*")); len(rings) > 0 {
		left = append(left, rings...)
	}
	if len(left) > 0 {
		sweepAfterKills(t, s)
		t.Fatalf("interrupted bench left %v", left)
	}
}
