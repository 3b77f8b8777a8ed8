//go:build linux

package metrics

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"omnishm/shmstate"
)

// StateCollector is a prometheus.Collector of one user's omnishm files in
// /dev/shm, scanned at each scrape by a shmstate.Tracker: read-only, and
// never waiting on a lock (a ring whose lock is held is reported busy).
// The Tracker is what gives a frame's age: the time since the first scrape
// that saw it ready. Concurrent scrapes are serialised.
type StateCollector struct {
	opts    shmstate.Options
	tracker shmstate.Tracker
	errors  atomic.Uint64
}

// NewStateCollector returns a collector of the files o selects (its Now is
// ignored: each scrape is timed by the clock).
func NewStateCollector(o shmstate.Options) *StateCollector {
	o.Now = time.Time{}
	return &StateCollector{opts: o}
}

// The descriptors, in the order Describe sends them.
var (
	stateDescs descs
	ringLabels = []string{"ring_dir", "ring", "from", "to", "pid"}

	scopeInfoDesc = stateDescs.add("omnishm_shm_scope_info",
		"A deployment scope: its ring directory, its wakeup scope string when known (--scope), its wake directory.",
		[]string{"ring_dir", "scope", "wake_dir"})
	ringProducerDesc = stateDescs.add("omnishm_shm_ring_producer",
		"The liveness of a ring's producer by its start time (SPEC §7): 1 for the current state (alive, dead or unknown).",
		append(ringLabels[:len(ringLabels):len(ringLabels)], "state"))
	ringCapacityDesc = stateDescs.add("omnishm_shm_ring_capacity_bytes",
		"A ring's capacity.", ringLabels)
	ringFileDesc = stateDescs.add("omnishm_shm_ring_file_bytes",
		"A ring file's size in /dev/shm (capacity plus its 64-byte header).", ringLabels)
	ringUsedDesc = stateDescs.add("omnishm_shm_ring_used_bytes",
		"Bytes between a ring's tail and head: frames not reclaimed yet. Absent while the ring is busy.", ringLabels)
	ringReadyDesc = stateDescs.add("omnishm_shm_ring_ready_frames",
		"Frames published and not claimed. Absent while the ring is busy.", ringLabels)
	ringDoneDesc = stateDescs.add("omnishm_shm_ring_done_frames",
		"Frames claimed or retired, not reclaimed yet. Absent while the ring is busy.", ringLabels)
	ringOldestDesc = stateDescs.add("omnishm_shm_ring_oldest_ready_age_seconds",
		"How long the oldest ready frame has been ready, since the first scrape that saw it (a lower bound); 0 without ready frames.", ringLabels)
	ringPutBytesDesc = stateDescs.add("omnishm_shm_ring_put_bytes_total",
		"Bytes ever put into a ring (its head position; frame headers, keys and padding included). Absent while busy.", ringLabels)
	ringReclaimedDesc = stateDescs.add("omnishm_shm_ring_reclaimed_bytes_total",
		"Bytes a ring's producer has reclaimed (its tail position). Absent while busy.", ringLabels)
	ringBusyDesc = stateDescs.add("omnishm_shm_ring_busy",
		"1 when another process held the ring's lock at the scrape, which never waits for it.", ringLabels)
	ringMarkerDesc = stateDescs.add("omnishm_shm_ring_marker",
		"1 when the ring's discovery marker exists (receivers find the ring through it).", ringLabels)
	ringInvalidDesc = stateDescs.add("omnishm_shm_ring_invalid",
		"1 when the ring's header or frames break the protocol (or the header is not written yet).", ringLabels)
	ringAgeDesc = stateDescs.add("omnishm_shm_ring_age_seconds",
		"Time since the ring file was last modified by a write or resize: since its creation.", ringLabels)
	markersDesc = stateDescs.add("omnishm_shm_markers_without_ring",
		"Discovery markers whose ring file is gone.", []string{"ring_dir"})
	fifosDesc = stateDescs.add("omnishm_shm_fifos",
		"Wakeup FIFOs of a scope, by stage and whether a process reads them.", []string{"ring_dir", "stage", "reader"})
	segmentsDesc = stateDescs.add("omnishm_shm_segments",
		"Per-key segments (payloads that took the per-key path and are not claimed yet).", nil)
	segmentBytesDesc = stateDescs.add("omnishm_shm_segment_bytes",
		"Bytes held by per-key segments.", nil)
	segmentOldestDesc = stateDescs.add("omnishm_shm_segment_oldest_age_seconds",
		"Age of the oldest per-key segment; 0 without segments.", nil)
	locksDesc = stateDescs.add("omnishm_shm_lock_files",
		"Per-key lock files, by state: segment_pending (its segment exists), no_segment (young), orphan (no segment, older than 60 s).",
		[]string{"state"})
	lockOldestDesc = stateDescs.add("omnishm_shm_lock_file_oldest_age_seconds",
		"Age of the oldest per-key lock file; 0 without lock files.", nil)
	orphansDesc = stateDescs.add("omnishm_shm_orphan_candidates",
		"What `omnishm prune` would consider removing, by kind: rings of dead producers, markers without rings, orphan lock files, FIFOs without readers, sleepers files whose FIFO is gone or unread.",
		[]string{"kind"})
	orphanBytesDesc = stateDescs.add("omnishm_shm_orphan_ring_bytes",
		"Bytes held by ring files of dead producers.", nil)
	scanDurationDesc = stateDescs.add("omnishm_shm_scan_duration_seconds",
		"How long the scrape's scan of /dev/shm took.", nil)
	scanSuccessDesc = stateDescs.add("omnishm_shm_scan_success",
		"1 when the scrape's scan of /dev/shm succeeded; without it only the scan metrics are exported.", nil)
	scanErrorsDesc = stateDescs.add("omnishm_shm_scan_errors_total",
		"Scans of /dev/shm that failed.", nil)
)

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range stateDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	st, err := c.tracker.Scan(c.opts)
	gauge(ch, scanDurationDesc, time.Since(start).Seconds())
	if err != nil {
		c.errors.Add(1)
	}
	counter(ch, scanErrorsDesc, c.errors.Load())
	gauge(ch, scanSuccessDesc, flag(err == nil))
	if err != nil {
		return
	}
	for _, sc := range st.Scopes {
		gauge(ch, scopeInfoDesc, 1, sc.RingDir, label(sc.Name), sc.WakeDir)
		for _, r := range sc.Rings {
			collectRing(ch, sc, r)
		}
		gauge(ch, markersDesc, float64(len(sc.MarkersWithoutRing)), sc.RingDir)
		type fifoKey struct {
			stage  string
			reader bool
		}
		fifos := map[fifoKey]int{}
		for _, f := range sc.FIFOs {
			fifos[fifoKey{f.Stage, f.Reader}]++
		}
		for k, n := range fifos {
			gauge(ch, fifosDesc, float64(n), sc.RingDir, k.stage, strconv.FormatBool(k.reader))
		}
	}
	var bytes int64
	var oldest shmstate.Age
	for _, s := range st.Segments {
		bytes += s.Size
		oldest = max(oldest, s.Age)
	}
	gauge(ch, segmentsDesc, float64(len(st.Segments)))
	gauge(ch, segmentBytesDesc, float64(bytes))
	gauge(ch, segmentOldestDesc, seconds(oldest))
	locks := map[string]int{"segment_pending": 0, "no_segment": 0, "orphan": 0}
	oldest = 0
	for _, l := range st.Locks {
		switch {
		case l.Segment:
			locks["segment_pending"]++
		case l.Orphan:
			locks["orphan"]++
		default:
			locks["no_segment"]++
		}
		oldest = max(oldest, l.Age)
	}
	for state, n := range locks {
		gauge(ch, locksDesc, float64(n), state)
	}
	gauge(ch, lockOldestDesc, seconds(oldest))
	o := st.Orphans()
	for kind, n := range map[string]int{"ring": o.Rings, "marker": o.Markers, "lock": o.Locks, "fifo": o.FIFOs, "sleepers": o.Sleepers} {
		gauge(ch, orphansDesc, float64(n), kind)
	}
	gauge(ch, orphanBytesDesc, float64(o.RingBytes))
}

func collectRing(ch chan<- prometheus.Metric, sc shmstate.Scope, r shmstate.Ring) {
	labels := []string{sc.RingDir, strings.TrimPrefix(r.Name, sc.RingDir+"_"), r.From, r.To, strconv.Itoa(r.PID)}
	for _, state := range []shmstate.Producer{shmstate.Alive, shmstate.Dead, shmstate.Unknown} {
		gauge(ch, ringProducerDesc, flag(r.Producer == state), append(labels, string(state))...)
	}
	gauge(ch, ringCapacityDesc, float64(r.Capacity), labels...)
	gauge(ch, ringFileDesc, float64(r.FileSize), labels...)
	gauge(ch, ringBusyDesc, flag(r.Busy), labels...)
	gauge(ch, ringMarkerDesc, flag(r.Marker), labels...)
	gauge(ch, ringInvalidDesc, flag(r.Error != ""), labels...)
	gauge(ch, ringAgeDesc, seconds(r.Age), labels...)
	gauge(ch, ringOldestDesc, seconds(r.OldestReady), labels...)
	if r.Busy || r.Capacity == 0 {
		return
	}
	gauge(ch, ringUsedDesc, float64(r.Used), labels...)
	gauge(ch, ringReadyDesc, float64(r.Ready), labels...)
	gauge(ch, ringDoneDesc, float64(r.Done), labels...)
	counter(ch, ringPutBytesDesc, r.Head, labels...)
	counter(ch, ringReclaimedDesc, r.Tail, labels...)
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func seconds(a shmstate.Age) float64 { return time.Duration(a).Seconds() }
