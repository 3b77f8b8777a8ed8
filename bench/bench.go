//go:build linux

// Package bench measures omnishm's transports against a Unix-domain socket
// moving the same bytes: what `omnishm bench` runs. Run carries out a Plan
// (a mode, payloads, transports, a count) and returns a Report: one Result
// per transport and payload, beside the floors measured in the same run
// (two plain copies of the bytes, two uncontended flock pairs), which
// prints as a table, as the JSON report scripts read, or as a plot.
// Latency times one message in flight, stream many, both into a receiver
// process: this same executable re-run in a role of its own (package
// internal/reexec). Pair puts and gets in one process. Fanout blocks many
// waiters in the receiver process and measures what they cost it idle and
// per delivery. The statistics (Summarize, CompareToUDS) and size parsing
// are pure and usable on their own.
//
// It builds on Linux only (build tag linux), as it needs the shared-memory transports it times.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// Result is one (transport, size) line of a report. JSON field names are
// the interface scripts read; fields after VsUDS are omitted where they do
// not apply, so a latency report keeps its first shape. In latency mode
// MsgsPerS is 1e6/MeanUs: the rate of back-to-back put->get with one
// message in flight. In stream mode MeanUs is the run's time per message
// (elapsed / Count, so MsgsPerS is the streaming rate) and P50Us, P99Us
// are percentiles of that time over each acknowledged batch of messages.
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
	// 1: faster than the socket), in stream mode this rate divided by the
	// socket's; nil in pair mode, for floor rows, or without a baseline.
	VsUDS *float64 `json:"vs_uds"`
	// SendUs is the p50 of the sender's own call in latency mode: the put
	// (or the socket's write) of each timed message, from the call to its
	// return; the part of P50Us before the receiver can take the message
	// (it may take it before the call returns: the lock's release and
	// what follows it are after the publication).
	SendUs float64 `json:"send_p50_us,omitempty"`
	// Window is the most messages a stream had in flight (stream mode).
	Window int `json:"window,omitempty"`
	// FlockUs is the p50 of the flock floor (two uncontended flock pairs,
	// as Report.Flock) timed after each of a pair's samples, in pair mode:
	// the floor its ratios are to, taken under the same load as it.
	FlockUs float64 `json:"flock_p50_us,omitempty"`
	// FlockRatio is a pair's p50 over FlockUs (Report.Flock's p50 where
	// FlockUs is 0): how many times the two mandatory flock pairs it costs
	// (pair mode).
	FlockRatio *float64 `json:"flock_ratio,omitempty"`
	// FloorRatio is a pair's p50 over its floor at this size: that of
	// FlockRatio plus the memcpy row's p50, two plain copies of the bytes
	// (pair mode).
	FloorRatio *float64 `json:"floor_ratio,omitempty"`
	// Fallbacks counts the timed puts of a ring result that went per-key
	// (a frame over a quarter of the ring). Not in the JSON report, which
	// names such a result ring->perkey or ring+perkey instead.
	Fallbacks int `json:"-"`
}

// FanoutResult is one fanout measurement: one transport, one kind of
// waiter, one payload. CPU figures are the receiver process's, user and
// system time of all its threads (getrusage).
type FanoutResult struct {
	// Transport is what carried the puts: ring, perkey, or ring->perkey
	// (ring+perkey) as in Result.
	Transport string `json:"transport"`
	WaitIn    string `json:"wait_in"` // recv or reader
	Waiters   int    `json:"waiters"`
	Size      int    `json:"size"`
	// IdleS is the measured idle window: every waiter blocked, nothing
	// arriving. IdleCPUPct is the CPU spent over it, in % of one core.
	IdleS      float64 `json:"idle_s"`
	IdleCPUPct float64 `json:"idle_cpu_pct"`
	// Threads is the receiver's OS thread count at the end of the idle
	// window (/proc/self/status; 0 where there is none).
	Threads int `json:"threads"`
	// CPUPerMsgUs is the CPU spent from the end of the idle window until
	// the last waiter had its message, divided by Waiters. Each delivery
	// is one round trip of the harness: the receiver, idle, is woken (by
	// the put), and answers one line to this process, which paces the
	// puts. HarnessUs is what such a round trip costs the receiver without
	// a delivery: woken from idle by a line from this process, it answers
	// one; timed over a hundred once no waiter is left.
	CPUPerMsgUs float64 `json:"cpu_per_msg_us"`
	HarnessUs   float64 `json:"harness_us"`
	// FlockPairs is CPUPerMsgUs in uncontended flock pairs (LOCK_EX +
	// LOCK_UN, half of Report.Flock's p50); NetFlockPairs is CPUPerMsgUs
	// less HarnessUs in them: what the delivery itself costs.
	FlockPairs    *float64 `json:"flock_pairs"`
	NetFlockPairs *float64 `json:"net_flock_pairs"`
	// PipedCPUPerMsgUs is the CPU per delivery over PipedRounds pipelined
	// rounds: every waiter re-arms on a new key as its message arrives
	// while this process puts one round (a message per waiter) after
	// another, two rounds in flight; the receiver answers one line per
	// round, whose cost (HarnessUs) is taken out. PipedFlockPairs is it in
	// flock pairs: the figure a delivery's CPU target is measured by.
	PipedRounds      int      `json:"piped_rounds"`
	PipedCPUPerMsgUs float64  `json:"piped_cpu_per_msg_us"`
	PipedFlockPairs  *float64 `json:"piped_flock_pairs"`
	// PipedGCPerMsgUs is the part of PipedCPUPerMsgUs the garbage
	// collector spent, over PipedGCCycles cycles: the runtime's own
	// estimate (runtime/metrics' /cpu/classes/gc/total: assists, workers
	// and pauses), which leans high, as it counts a pause as GOMAXPROCS
	// CPUs busy. Each cycle scans every parked waiter's stack, and how
	// often one runs is the process's GOGC: the part a stage tunes, not
	// the transport.
	PipedGCPerMsgUs float64 `json:"piped_gc_per_msg_us"`
	PipedGCCycles   int     `json:"piped_gc_cycles"`
	// PipedAllocBytesPerMsg and PipedAllocsPerMsg are the receiver's heap
	// allocations per delivery over the same rounds (runtime/metrics'
	// /gc/heap/allocs), its waiters' and the harness's included: what sets
	// how often a cycle runs. A delivery allocates at least its payload,
	// which the receiver owns.
	PipedAllocBytesPerMsg float64 `json:"piped_alloc_bytes_per_msg"`
	PipedAllocsPerMsg     float64 `json:"piped_allocs_per_msg"`
}

// Report is the whole --json output. Results is empty in fanout mode;
// Flock and Fanout are omitted where they were not measured.
type Report struct {
	Mode    string   `json:"mode"`
	Results []Result `json:"results"`
	// Flock is the floor pair and fanout modes measure first: two
	// uncontended flock pairs on a /dev/shm file, timed one sample at a
	// time as the pairs are (transport "flock", size 0).
	Flock  *Result        `json:"flock,omitempty"`
	Fanout []FanoutResult `json:"fanout,omitempty"`
	// Pinned are the CPUs of this process and of the receiver process
	// under Plan.Pin, in that order; nil when not pinned.
	Pinned []int `json:"pinned,omitempty"`
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
	compareTo(results, uds, func(x, base Result) *float64 { return quotient(base.P50Us, x.P50Us) })
}

// compareTo sets VsUDS of every result that has a result of transport uds
// of the same size, as vs(result, that one).
func compareTo(results []Result, uds string, vs func(x, base Result) *float64) {
	base := map[int]Result{}
	for _, x := range results {
		if x.Transport == uds {
			base[x.Size] = x
		}
	}
	for i := range results {
		if b, ok := base[results[i].Size]; ok {
			results[i].VsUDS = vs(results[i], b)
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

// WriteTable writes the report as an aligned table, and the CPUs of a
// pinned run and the flock floor on lines of their own below it.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	if r.Mode == string(Fanout) {
		r.fanoutTable(tw)
	} else {
		r.resultTable(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Pinned != nil {
		if _, err := fmt.Fprintf(w, "pinned: this process on CPU %d, the receiver on CPU %d\n", r.Pinned[0], r.Pinned[1]); err != nil {
			return err
		}
	}
	if f := r.Flock; f != nil {
		again := ""
		if r.Mode == string(Pair) {
			again = "; timed again after each pair, whose p50 is the row's flock µs, what ÷ flock and ÷ floor divide by"
		}
		_, err := fmt.Fprintf(w, "floor: two uncontended flock pairs (LOCK_EX+LOCK_UN) on a /dev/shm file: p50 %.2f µs, mean %.2f µs, p99 %.2f µs over %d%s\n",
			f.P50Us, f.MeanUs, f.P99Us, f.Count, again)
		return err
	}
	return nil
}

func (r Report) resultTable(tw io.Writer) {
	stream, pair, latency := r.Mode == string(Stream), r.Mode == string(Pair), r.Mode == string(Latency)
	vsUDS := latency || stream
	header := "transport\tsize\tcount\t"
	if stream {
		header += "window\tµs/msg\tp50 µs/msg\tp99 µs/msg\t"
	} else {
		header += "mean µs\tp50 µs\tp99 µs\t"
	}
	header += "msgs/s\tMB/s\t"
	if vsUDS {
		header += "vs uds\t"
	}
	if latency {
		header += "send µs\t"
	}
	if pair {
		header += "flock µs\t÷ flock\t÷ floor\t"
	}
	fmt.Fprintln(tw, header)
	for _, x := range r.Results {
		line := fmt.Sprintf("%s\t%s\t%d\t", x.Transport, FormatSize(x.Size), x.Count)
		if stream {
			line += optional(x.Window > 0, "%d", x.Window)
		}
		line += fmt.Sprintf("%.1f\t%.1f\t%.1f\t%.0f\t%.1f\t", x.MeanUs, x.P50Us, x.P99Us, x.MsgsPerS, x.BytesPerS/1e6)
		if vsUDS {
			line += ratio(x.VsUDS)
		}
		if latency {
			line += optional(x.SendUs > 0, "%.1f", x.SendUs)
		}
		if pair {
			line += optional(x.FlockUs > 0, "%.2f", x.FlockUs) + ratio(x.FlockRatio) + ratio(x.FloorRatio)
		}
		fmt.Fprintln(tw, line)
	}
}

func (r Report) fanoutTable(tw io.Writer) {
	fmt.Fprintln(tw, "transport\twait in\twaiters\tsize\tidle s\tidle CPU %\tthreads\tCPU µs/msg\tflock pairs/msg\tharness µs\tnet flock pairs\tpiped CPU µs/msg\tpiped flock pairs\tof which GC µs/msg\tGC cycles\talloc B/msg\tallocs/msg\t")
	for _, x := range r.Fanout {
		piped := x.PipedRounds > 0 // none where two rounds' bytes are too many to keep in flight
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.2f\t%.1f\t%d\t%.1f\t%s%.1f\t%s\n", x.Transport, x.WaitIn, x.Waiters, FormatSize(x.Size),
			x.IdleS, x.IdleCPUPct, x.Threads, x.CPUPerMsgUs, optional(x.FlockPairs != nil, "%.0f", deref(x.FlockPairs)), x.HarnessUs,
			optional(x.NetFlockPairs != nil, "%.0f", deref(x.NetFlockPairs))+optional(piped, "%.1f", x.PipedCPUPerMsgUs)+
				optional(x.PipedFlockPairs != nil, "%.1f", deref(x.PipedFlockPairs))+
				optional(piped, "%.2f", x.PipedGCPerMsgUs)+optional(piped, "%d", x.PipedGCCycles)+
				optional(piped, "%.0f", x.PipedAllocBytesPerMsg)+optional(piped, "%.1f", x.PipedAllocsPerMsg))
	}
}

// ratio is a table cell for an optional ratio.
func ratio(v *float64) string { return optional(v != nil, "%.2fx", deref(v)) }

// optional is a table cell: the value when there is one, else "-".
func optional(ok bool, format string, v any) string {
	if !ok {
		return "-\t"
	}
	return fmt.Sprintf(format, v) + "\t"
}

func deref(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}
