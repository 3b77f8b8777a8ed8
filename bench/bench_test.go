package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
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
	first := rs[0].(map[string]any)
	var keys []string
	for k := range first {
		keys = append(keys, k)
	}
	slices.Sort(keys)
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
