// Package bench measures omnishm's transports against a Unix-domain socket
// moving the same bytes: what `omnishm bench` runs. Run carries out a Plan
// (a mode, payloads, transports, a count) and returns a Report: one Result
// per transport and payload, which prints as a table, as the JSON report
// scripts read, or as a plot. In latency mode a receiver process, this
// same executable re-run in a role of its own (package internal/reexec),
// receives while this process sends; in pair mode one process does both.
// The statistics (Summarize, CompareToUDS) and size parsing are pure and
// usable on their own.
package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ErrBadSize is returned by ParseSize and ParseSizes for text that is not a
// payload size.
var ErrBadSize = errors.New("bench: bad size")

// units are the size suffixes ParseSize accepts, case-insensitively:
// binary (KiB = 1024) and decimal (KB = 1000), plus B for bytes.
var units = []struct {
	suffix string
	factor int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"b", 1},
}

// maxSize bounds a benchmark payload: the largest per-key segment anyone
// should time on a laptop, and far from int overflow.
const maxSize = 4 << 30

// ParseSize reads a byte count: 512, 4KiB, 64KiB, 1MiB, 1GiB (binary),
// 4KB, 1MB (decimal), 100B. The result is positive and at most 4 GiB.
func ParseSize(s string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	factor := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, factor = strings.TrimSpace(num), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > maxSize/factor {
		return 0, fmt.Errorf("%w: %q (want e.g. 512, 4KiB, 1MiB, 1MB)", ErrBadSize, s)
	}
	return int(n * factor), nil
}

// ParseSizes reads a comma-separated list of sizes, in the given order.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := ParseSize(part)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// FormatSize prints a byte count the way ParseSize reads it back, with a
// binary unit when it divides exactly: 512, 4KiB, 1MiB, 1000.
func FormatSize(n int) string {
	for _, u := range []struct {
		suffix string
		factor int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.factor && n%u.factor == 0 {
			return strconv.Itoa(n/u.factor) + u.suffix
		}
	}
	return strconv.Itoa(n)
}

// Result is one (transport, size) line of a report. JSON field names are
// the interface scripts read. In latency mode MsgsPerS is 1e6/MeanUs: the
// rate of back-to-back put->get with one message in flight.
type Result struct {
	Transport string  `json:"transport"`
	Size      int     `json:"size"`
	Count     int     `json:"count"`
	MeanUs    float64 `json:"mean_us"`
	P50Us     float64 `json:"p50_us"`
	P99Us     float64 `json:"p99_us"`
	MsgsPerS  float64 `json:"msgs_per_s"`
	BytesPerS float64 `json:"bytes_per_s"`
	// VsUDS is the UDS baseline's p50 latency divided by this one's (above
	// 1: faster than the socket); nil in pair mode or without a baseline.
	VsUDS *float64 `json:"vs_uds"`
	// Fallbacks counts the timed puts of a ring result that went per-key
	// (a frame over a quarter of the ring). Not in the JSON report, whose
	// shape is fixed.
	Fallbacks int `json:"-"`
}

// Report is the whole --json output.
type Report struct {
	Mode    string   `json:"mode"`
	Results []Result `json:"results"`
}

// Summarize computes a Result's statistics from per-message latencies.
// Percentiles are nearest-rank. The latencies are sorted in place.
func Summarize(transport string, size int, latencies []time.Duration) Result {
	r := Result{Transport: transport, Size: size, Count: len(latencies)}
	if len(latencies) == 0 {
		return r
	}
	slices.Sort(latencies)
	var sum time.Duration
	for _, d := range latencies {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	r.MeanUs = us(sum) / float64(len(latencies))
	r.P50Us = us(percentile(latencies, 50))
	r.P99Us = us(percentile(latencies, 99))
	if r.MeanUs > 0 {
		r.MsgsPerS = 1e6 / r.MeanUs
		r.BytesPerS = r.MsgsPerS * float64(size)
	}
	return r
}

// percentile is the nearest-rank p-th percentile of sorted values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// CompareToUDS fills VsUDS of every result from the result of transport
// uds of the same size (uds p50 / this p50).
func CompareToUDS(results []Result, uds string) {
	base := map[int]float64{}
	for _, r := range results {
		if r.Transport == uds {
			base[r.Size] = r.P50Us
		}
	}
	for i := range results {
		b, ok := base[results[i].Size]
		if ok && results[i].P50Us > 0 {
			v := b / results[i].P50Us
			results[i].VsUDS = &v
		}
	}
}

// WriteJSON writes the report as one JSON object and a newline.
func (r Report) WriteJSON(w io.Writer) error {
	if r.Results == nil {
		r.Results = []Result{}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteTable writes the report as an aligned table.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	header := "transport\tsize\tcount\tmean µs\tp50 µs\tp99 µs\tmsgs/s\tMB/s\t"
	if r.Mode == "latency" {
		header += "vs uds\t"
	}
	fmt.Fprintln(tw, header)
	for _, x := range r.Results {
		line := fmt.Sprintf("%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.0f\t%.1f\t", x.Transport, FormatSize(x.Size), x.Count,
			x.MeanUs, x.P50Us, x.P99Us, x.MsgsPerS, x.BytesPerS/1e6)
		if r.Mode == "latency" {
			if x.VsUDS != nil {
				line += fmt.Sprintf("%.2fx\t", *x.VsUDS)
			} else {
				line += "-\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}
