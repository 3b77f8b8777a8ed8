//go:build linux

package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"omnishm/tensor"
)

func TestParseSize(t *testing.T) {
	good := map[string]int{
		"512": 512, "4KiB": 4096, "64kib": 65536, "1MiB": 1 << 20, "1GiB": 1 << 30,
		"4KB": 4000, "1MB": 1000000, "100B": 100, " 2 KiB ": 2048, "4GiB": 4 << 30,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "KiB", "1.5MiB", "4TiB", "5GiB", "12x", "99999999999999999999"} {
		if _, err := ParseSize(in); !errors.Is(err, ErrBadSize) {
			t.Errorf("ParseSize(%q) err = %v, want ErrBadSize", in, err)
		}
	}
	got, err := ParseSizes("512,4KiB,64KiB,1MiB")
	if err != nil || !slices.Equal(got, []int{512, 4096, 65536, 1 << 20}) {
		t.Errorf("ParseSizes = %v, %v", got, err)
	}
	if _, err := ParseSizes("512,,1"); err == nil {
		t.Error("empty list item accepted")
	}
	for n, want := range map[int]string{512: "512", 4096: "4KiB", 1 << 20: "1MiB", 1000: "1000", 3 << 30: "3GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("FormatSize(%d) does not parse back: %d, %v", n, back, err)
		}
	}
}

func TestSummarize(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Microsecond)
	}
	r := Summarize("ring", 4096, lat)
	if r.Count != 100 || r.MeanUs != 50.5 || r.P50Us != 50 || r.P99Us != 99 {
		t.Fatalf("summary = %+v", r)
	}
	if want := 1e6 / 50.5; r.MsgsPerS != want || r.BytesPerS != want*4096 {
		t.Errorf("rates = %v, %v", r.MsgsPerS, r.BytesPerS)
	}
	one := Summarize("uds", 1, []time.Duration{7 * time.Microsecond})
	if one.P50Us != 7 || one.P99Us != 7 || one.MeanUs != 7 {
		t.Errorf("one sample = %+v", one)
	}
	if empty := Summarize("x", 1, nil); empty.Count != 0 || empty.MsgsPerS != 0 {
		t.Errorf("empty = %+v", empty)
	}
}

func TestReport(t *testing.T) {
	results := []Result{
		{Transport: "ring", Size: 512, Count: 3, P50Us: 5},
		{Transport: "uds", Size: 512, Count: 3, P50Us: 10},
		{Transport: "perkey", Size: 1024, Count: 3, P50Us: 20},
	}
	CompareToUDS(results, "uds")
	if results[0].VsUDS == nil || *results[0].VsUDS != 2 || *results[1].VsUDS != 1 || results[2].VsUDS != nil {
		t.Fatalf("vs_uds = %v %v %v", results[0].VsUDS, results[1].VsUDS, results[2].VsUDS)
	}
	var buf bytes.Buffer
	if err := (Report{Mode: "latency", Results: results}).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	rs := back["results"].([]any)
	keys := jsonKeys(rs[0].(map[string]any))
	want := []string{"bytes_per_s", "count", "mean_us", "msgs_per_s", "p50_us", "p99_us", "size", "transport", "vs_uds"}
	if back["mode"] != "latency" || len(rs) != 3 || !slices.Equal(keys, want) || rs[2].(map[string]any)["vs_uds"] != nil {
		t.Fatalf("json = %s", buf.Bytes())
	}
	buf.Reset()
	if err := (Report{Mode: "latency", Results: results}).WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "2.00x") || !strings.Contains(lines[3], "1KiB") {
		t.Fatalf("table:\n%s", buf.String())
	}
}

// jsonKeys is the sorted key set of a JSON object.
func jsonKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// TestReportModes: the fields the new modes add to the JSON report appear
// only where they apply, and each mode's table has its columns.
func TestReportModes(t *testing.T) {
	base := []string{"bytes_per_s", "count", "mean_us", "msgs_per_s", "p50_us", "p99_us", "size", "transport", "vs_uds"}
	with := func(extra ...string) []string {
		return slices.Sorted(slices.Values(append(slices.Clone(base), extra...)))
	}
	flock := Result{Transport: Flock, Count: 5, P50Us: 2, MeanUs: 2.5, P99Us: 3}
	pair := Report{Mode: "pair", Flock: &flock, Results: []Result{
		{Transport: "ring", Size: 512, Count: 5, P50Us: 5}, {Transport: "ring", Size: 4096, Count: 5, P50Us: 9},
		{Transport: "ring", Size: 512, Count: 5, P50Us: 6, FlockUs: 2.5}, // its own floor
		{Transport: Memcpy, Size: 512, Count: 5, P50Us: 0.5}, {Transport: ShmFile, Size: 512, Count: 5, P50Us: 4},
	}}
	compareToFloor(&pair)
	if r := pair.Results; *r[0].FlockRatio != 2.5 || *r[0].FloorRatio != 2 || *r[1].FlockRatio != 4.5 || r[1].FloorRatio != nil ||
		*r[2].FlockRatio != 2.4 || *r[2].FloorRatio != 2 || r[3].FlockRatio != nil || r[4].FlockRatio != nil {
		t.Fatalf("pair ratios %+v", r)
	}
	stream := Report{Mode: "stream", Results: []Result{
		{Transport: "ring", Size: 512, Count: 9, MsgsPerS: 300, Window: 8}, {Transport: "uds", Size: 512, Count: 9, MsgsPerS: 100, Window: 8},
		{Transport: Memcpy, Size: 512, Count: 9, MsgsPerS: 1000},
	}}
	compareRates(stream.measured(), UDS)
	if r := stream.Results; *r[0].VsUDS != 3 || *r[1].VsUDS != 1 || r[2].VsUDS != nil {
		t.Fatalf("stream rates %+v", r)
	}
	vs := 2.0
	latency := Report{Mode: "latency", Results: []Result{
		{Transport: "ring", Size: 512, Count: 9, P50Us: 7.5, SendUs: 3.4, VsUDS: &vs}, {Transport: Memcpy, Size: 512, Count: 9, P50Us: 0.1},
	}}
	fanout := Report{Mode: "fanout", Flock: &flock, Fanout: []FanoutResult{
		{Transport: "ring", WaitIn: WaitRecv, Waiters: 3, Size: 512, IdleS: 2, IdleCPUPct: 9.5, Threads: 7, CPUPerMsgUs: 250, HarnessUs: 50},
		{Transport: "ring", WaitIn: WaitReader, Waiters: 3, Size: 512, IdleS: 2, IdleCPUPct: 9.5, Threads: 7, CPUPerMsgUs: 250, HarnessUs: 50,
			PipedRounds: 10, PipedCPUPerMsgUs: 4.5, PipedGCPerMsgUs: 1.25, PipedGCCycles: 7,
			PipedAllocBytesPerMsg: 1664, PipedAllocsPerMsg: 8.5},
	}}
	fanoutInFlockPairs(&fanout)
	if x := fanout.Fanout[0]; *x.FlockPairs != 250 || *x.NetFlockPairs != 200 {
		t.Fatalf("flock pairs %v, net %v", *x.FlockPairs, *x.NetFlockPairs)
	}
	for _, tc := range []struct {
		report     Report
		top        []string
		rows       [][]string
		tableLines int
		tableHas   []string
	}{
		{pair, []string{"flock", "mode", "results"}, [][]string{with("flock_ratio", "floor_ratio"), with("flock_ratio"),
			with("flock_p50_us", "flock_ratio", "floor_ratio"), base, base},
			7, []string{"flock µs", "÷ flock", "2.50x", "2.00x", "2.40x", "floor: two uncontended flock pairs", "p50 2.00 µs", "timed again after each pair"}},
		{stream, []string{"mode", "results"}, [][]string{with("window"), with("window"), base},
			4, []string{"window", "µs/msg", "3.00x"}},
		{latency, []string{"mode", "results"}, [][]string{with("send_p50_us"), base},
			3, []string{"vs uds", "send µs", "2.00x", "3.4"}},
		{fanout, []string{"fanout", "flock", "mode", "results"}, nil,
			4, []string{"idle CPU %", "9.5", "250.0", "floor:", "of which GC µs/msg", "1.25", "alloc B/msg", "1664", "8.5"}},
	} {
		var buf bytes.Buffer
		if err := tc.report.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		rs := back["results"].([]any)
		if !slices.Equal(jsonKeys(back), tc.top) || len(rs) != len(tc.rows) {
			t.Errorf("%s json: %s", tc.report.Mode, buf.Bytes())
		}
		for i, row := range rs {
			if keys := jsonKeys(row.(map[string]any)); !slices.Equal(keys, tc.rows[i]) {
				t.Errorf("%s result %d keys %v, want %v", tc.report.Mode, i, keys, tc.rows[i])
			}
		}
		if f, ok := back["flock"].(map[string]any); ok && !slices.Equal(jsonKeys(f), base) {
			t.Errorf("%s flock keys %v", tc.report.Mode, jsonKeys(f))
		}
		if fo, ok := back["fanout"].([]any); ok {
			want := []string{"cpu_per_msg_us", "flock_pairs", "harness_us", "idle_cpu_pct", "idle_s", "net_flock_pairs", "piped_alloc_bytes_per_msg", "piped_allocs_per_msg", "piped_cpu_per_msg_us", "piped_flock_pairs", "piped_gc_cycles", "piped_gc_per_msg_us", "piped_rounds", "size", "threads", "transport", "wait_in", "waiters"}
			if keys := jsonKeys(fo[0].(map[string]any)); !slices.Equal(keys, want) {
				t.Errorf("fanout keys %v, want %v", keys, want)
			}
		}
		buf.Reset()
		if err := tc.report.WriteTable(&buf); err != nil {
			t.Fatal(err)
		}
		table := buf.String()
		if n := strings.Count(table, "\n"); n != tc.tableLines {
			t.Errorf("%s table has %d lines, want %d:\n%s", tc.report.Mode, n, tc.tableLines, table)
		}
		for _, s := range tc.tableHas {
			if !strings.Contains(table, s) {
				t.Errorf("%s table lacks %q:\n%s", tc.report.Mode, s, table)
			}
		}
	}
}

// TestTensorPayloads: the generated tensors hold the pattern i%1000 * 0.5
// at every index, past the doubling copies' seams.
func TestTensorPayloads(t *testing.T) {
	ps, err := TensorPayloads([]int{4, 4000, 40004})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		values, err := tensor.Values[float32](p.Value.(map[string]any)["data"].(*tensor.Tensor))
		if err != nil || len(values)*4 != p.Size {
			t.Fatalf("%s: %d values, %v", FormatSize(p.Size), len(values), err)
		}
		for i, v := range values {
			if v != float32(i%1000)*0.5 {
				t.Fatalf("%s: value %d is %v", FormatSize(p.Size), i, v)
			}
		}
	}
}
