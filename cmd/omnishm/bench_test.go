//go:build linux

package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// benchReport is a parsed --json report.
type benchReport struct {
	Mode    string           `json:"mode"`
	Results []map[string]any `json:"results"`
	Flock   map[string]any   `json:"flock"`
	Fanout  []map[string]any `json:"fanout"`
}

// resultKeys are the fields of every result; a mode's own follow them.
var resultKeys = []string{"bytes_per_s", "count", "mean_us", "msgs_per_s", "p50_us", "p99_us", "size", "transport", "vs_uds"}

// benchJSON runs bench with --json and returns the parsed report, checking
// the exact shape scripts rely on: the top-level keys, and the keys of
// every result (resultKeys, plus extra[transport] for the rows of that
// transport, every row but the floor rows (memcpy, shmfile) when the key
// is "*").
func benchJSON(t *testing.T, mode string, top []string, extra map[string][]string, args ...string) benchReport {
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
	var report benchReport
	if err := json.Unmarshal(b, &report); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, b)
	}
	var topMap map[string]any
	json.Unmarshal(b, &topMap)
	if got := sortedKeys(topMap); !slices.Equal(got, top) || report.Mode != mode {
		t.Fatalf("report keys %v, want %v: %s", got, top, b)
	}
	for _, res := range report.Results {
		want := slices.Clone(resultKeys)
		if res["transport"] != "memcpy" && res["transport"] != "shmfile" {
			want = append(want, extra["*"]...)
		}
		want = append(want, extra[res["transport"].(string)]...)
		want = slices.Sorted(slices.Values(want))
		if keys := sortedKeys(res); !slices.Equal(keys, want) {
			t.Errorf("%v result keys %v, want %v", res["transport"], keys, want)
		}
		if res["p50_us"].(float64) <= 0 || res["msgs_per_s"].(float64) <= 0 || res["p99_us"].(float64) < res["p50_us"].(float64) {
			t.Errorf("result %v", res)
		}
	}
	if report.Flock != nil && !slices.Equal(sortedKeys(report.Flock), resultKeys) {
		t.Errorf("flock keys %v", sortedKeys(report.Flock))
	}
	floorLine := 0
	if report.Flock != nil {
		floorLine = 1
	}
	rows := len(report.Results)
	if mode == "fanout" {
		rows = len(report.Fanout)
	}
	if lines := strings.Count(string(r.stdout), "\n"); lines != rows+1+floorLine {
		t.Errorf("table has %d lines for %d rows:\n%s", lines, rows, r.stdout)
	}
	return report
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

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
	res := benchJSON(t, "latency", []string{"mode", "results"}, map[string][]string{"*": {"send_p50_us"}},
		"--count", "3", "--sizes", "512,4KiB", "--transports", "ring,perkey,uds", "--plot", plot).Results
	want := []benchRow{{"ring", 512}, {"ring", 4096}, {"perkey", 512}, {"perkey", 4096}, {"uds", 512}, {"uds", 4096},
		{"memcpy", 512}, {"memcpy", 4096}, {"shmfile", 512}, {"shmfile", 4096}}
	if got := rows(res); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for _, r := range res {
		if r["transport"] == "memcpy" || r["transport"] == "shmfile" {
			if r["vs_uds"] != nil {
				t.Errorf("floor compared to uds: %v", r)
			}
			continue
		}
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
	top := []string{"flock", "mode", "results"}
	floor := map[string][]string{"*": {"flock_p50_us", "flock_ratio", "floor_ratio"}}
	rep := benchJSON(t, "pair", top, floor, "--count", "4", "--sizes", "512,2KiB", "--ring-bytes", "4096", "--transports", "ring,uds")
	want := []benchRow{{"ring", 512}, {"ring->perkey", 2048}, {"uds", 512}, {"uds", 2048}, {"memcpy", 512}, {"memcpy", 2048}}
	if got := rows(rep.Results); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for _, r := range rep.Results {
		if r["vs_uds"] != nil {
			t.Errorf("pair mode has vs_uds: %v", r)
		}
	}
	if rep.Flock["transport"] != "flock" || rep.Flock["p50_us"].(float64) <= 0 || rep.Flock["size"].(float64) != 0 {
		t.Errorf("flock floor %v", rep.Flock)
	}
	payload := filepath.Join(vectors, "tree_float32.json")
	res := benchJSON(t, "pair", top, floor, "--count", "2", "--payload", payload, "--transports", "perkey").Results
	if len(res) != 3 || res[0]["transport"] != "perkey" || res[0]["size"].(float64) < 100 || res[1]["size"] != res[0]["size"] ||
		res[2]["transport"] != "shmfile" || res[2]["size"] != res[0]["size"] {
		t.Errorf("--payload results %v", res)
	}
}

func TestBenchStream(t *testing.T) {
	res := benchJSON(t, "stream", []string{"mode", "results"}, map[string][]string{"*": {"window"}},
		"--count", "200", "--window", "8", "--sizes", "512,4KiB").Results
	// The default transports: nats too, over a server bench runs itself.
	want := []benchRow{{"ring", 512}, {"ring", 4096}, {"perkey", 512}, {"perkey", 4096}, {"nats", 512}, {"nats", 4096},
		{"uds", 512}, {"uds", 4096}, {"memcpy", 512}, {"memcpy", 4096}}
	if got := rows(res); !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for _, r := range res[:8] {
		if r["count"].(float64) != 200 || r["window"].(float64) != 8 || r["vs_uds"] == nil {
			t.Errorf("result %v", r)
		}
	}
}

func TestBenchFanout(t *testing.T) {
	rep := benchJSON(t, "fanout", []string{"fanout", "flock", "mode", "results"}, nil,
		"--waiters", "3", "--idle", "10ms", "--transports", "ring", "--wait-in", "recv,reader")
	if len(rep.Results) != 0 || len(rep.Fanout) != 2 {
		t.Fatalf("report %+v", rep)
	}
	want := []string{"cpu_per_msg_us", "flock_pairs", "harness_us", "idle_cpu_pct", "idle_s", "net_flock_pairs", "piped_alloc_bytes_per_msg", "piped_allocs_per_msg", "piped_cpu_per_msg_us", "piped_flock_pairs", "piped_gc_cycles", "piped_gc_per_msg_us", "piped_rounds", "size", "threads", "transport", "wait_in", "waiters"}
	for i, f := range rep.Fanout {
		if keys := sortedKeys(f); !slices.Equal(keys, want) {
			t.Errorf("fanout keys %v, want %v", keys, want)
		}
		if f["transport"] != "ring" || f["wait_in"] != []string{"recv", "reader"}[i] || f["waiters"].(float64) != 3 || f["size"].(float64) != 512 {
			t.Errorf("fanout %v", f)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	r := omnishm(t, nil, "bench", "--help")
	for _, s := range []string{"--mode stream", "--mode fanout --waiters", "--mode pair", "memcpy", "flock", "--window", "--wait-in", "--idle"} {
		if !strings.Contains(string(r.stdout), s) {
			t.Errorf("bench --help does not mention %q:\n%s", s, r.stdout)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "fanout", "--transports", "uds"}, `cannot time transport "uds"`},
		{[]string{"--mode", "fanout", "--count", "5"}, "no count"},
		{[]string{"--mode", "fanout", "--plot", "f.svg"}, "--plot"},
		{[]string{"--mode", "fanout", "--wait-in", "poll"}, `unknown wait-in "poll"`},
		{[]string{"--mode", "latency", "--waiters", "5"}, "waiters is for fanout mode"},
		{[]string{"--mode", "pair", "--window", "5"}, "window is for stream mode"},
		{[]string{"--mode", "stream", "--window", "-1"}, "window -1"},
	} {
		omnishm(t, nil, append([]string{"bench"}, tc.args...)...).wantFailure(t, exitUsage, tc.want)
	}
}

// TestBenchInterrupted: SIGINT mid-run stops the receiver process too,
// which removes its wake FIFO: the scope is left empty, and the status is 130.
func TestBenchInterrupted(t *testing.T) {
	s := opsScope(t)
	p := startCLI(t, nil, "bench", "--mode", "latency", "--scope", s, "--count", "10000000", "--sizes", "512", "--transports", "ring")
	shmtest.Eventually(t, shmtest.Patience, "the bench to start timing", func() bool {
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
