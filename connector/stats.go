//go:build linux

package connector

import (
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"omnishm/scope"
)

// This file holds a connector's per-edge figures (Stats): what each edge
// put and claimed by which path, why puts fell back to segments, the
// receivers waiting, and, once MeasureLatency is on, latency histograms.
// They live in a lock-free table, so the put and get paths pay a short scan
// and a few atomic adds; package metrics exports them to Prometheus.

// Path is the way a payload went: through the host ring or a per-key
// segment (SPEC §9).
type Path uint8

// The paths, in the order of the arrays of EdgeStats.
const (
	PathRing Path = iota
	PathSegment
	NumPaths // the number of paths, not a path
)

// String is the path's name as metrics label it: "ring", "segment".
func (p Path) String() string {
	switch p {
	case PathRing:
		return "ring"
	case PathSegment:
		return "segment"
	}
	return "unknown"
}

// Fallback is why a put took the per-key path instead of the host ring.
type Fallback uint8

// The reasons, in the order of EdgeStats.Fallbacks.
const (
	// FallbackRingFull: the ring had no room for the frame.
	FallbackRingFull Fallback = iota
	// FallbackFrameTooLarge: the payload exceeds the ring's per-frame limit
	// (a quarter of the ring, ring.Transport.MaxPayload) in every form.
	FallbackFrameTooLarge
	// FallbackRingDisabled: the connector has no ring (HostRingBytes NoRing).
	FallbackRingDisabled
	// FallbackSetupFailed: the edge's ring could not be set up, so the edge
	// uses segments from then on (one warning was logged).
	FallbackSetupFailed
	// FallbackNonNumericStage: an end of the edge is not a stage id, and
	// only numeric edges have rings.
	FallbackNonNumericStage
	NumFallbacks // the number of reasons, not a reason
)

var fallbackNames = [NumFallbacks]string{"ring_full", "frame_too_large", "ring_disabled", "setup_failed", "non_numeric_stage"}

// String is the reason as metrics label it: "ring_full", "frame_too_large",
// "ring_disabled", "setup_failed", "non_numeric_stage".
func (f Fallback) String() string {
	if f < NumFallbacks {
		return fallbackNames[f]
	}
	return "unknown"
}

// LatencyBuckets is the number of finite buckets of a Latency histogram.
// Bucket i holds durations over LatencyBound(i-1) up to LatencyBound(i):
// 1 µs, 2 µs, 4 µs, ... about 8.4 s; one more counts what exceeds them all.
const LatencyBuckets = 24

// LatencyBound is the upper bound of bucket i, 0 <= i < LatencyBuckets.
func LatencyBound(i int) time.Duration { return time.Microsecond << i }

// Latency is a snapshot of a latency histogram.
type Latency struct {
	// Counts are per bucket, not cumulative; Counts[LatencyBuckets] is the
	// number of durations over every bound.
	Counts [LatencyBuckets + 1]uint64
	Sum    time.Duration
}

// Count is the number of durations observed.
func (l Latency) Count() uint64 {
	var n uint64
	for _, c := range l.Counts {
		n += c
	}
	return n
}

// EdgeStats are one edge's figures since the connector opened. Arrays are
// indexed by Path and Fallback.
type EdgeStats struct {
	// From and To name the edge as Put and Get were called; edges past the
	// first MaxStatsEdges are counted together under From = To = "*".
	From, To string
	// Puts and PutBytes count publications and their payload bytes.
	Puts, PutBytes [NumPaths]uint64
	// Gets and GetBytes count claims (Get and Recv hits) and their bytes.
	Gets, GetBytes [NumPaths]uint64
	// Fallbacks count puts that did not take the ring, by reason; their sum
	// over every edge is Health().HostRingFallbacks.
	Fallbacks [NumFallbacks]uint64
	// PutLatency is how long successful Puts took, by path; RecvWait how
	// long successful Recvs took, call to return. Both stay empty until
	// MeasureLatency(true).
	PutLatency [NumPaths]Latency
	RecvWait   Latency
	// RecvWaiters is the number of Recv calls in progress on the edge.
	RecvWaiters int
}

// RingFile is a ring this connector produces into, one per edge that has
// put on the ring.
type RingFile struct {
	From, To string
	Path     string // /dev/shm/{ring name}
}

// Stats is a snapshot of a connector's per-edge figures. It owns its
// memory.
type Stats struct {
	Edges []EdgeStats // in the order the edges were first used
	Rings []RingFile  // sorted by path
	// LatencyMeasured says whether MeasureLatency is on.
	LatencyMeasured bool
}

// MaxStatsEdges bounds the edges a connector counts one by one, so the
// label sets metrics derive from them stay bounded whatever strings the
// callers pass as stages.
const MaxStatsEdges = 64

// overflowStage names both ends of the edge that gathers the edges past
// MaxStatsEdges.
const overflowStage = "*"

// Stats returns a snapshot of the connector's per-edge figures. It takes no
// lock the put and get paths take.
func (c *SHM) Stats() Stats {
	st := Stats{LatencyMeasured: c.stats.timing.Load()}
	if l := c.stats.edges.Load(); l != nil {
		for _, e := range *l {
			st.Edges = append(st.Edges, e.snapshot())
		}
	}
	c.stats.mu.Lock()
	for path, e := range c.stats.rings {
		st.Rings = append(st.Rings, RingFile{From: e.From, To: e.To, Path: path})
	}
	c.stats.mu.Unlock()
	slices.SortFunc(st.Rings, func(a, b RingFile) int { return strings.Compare(a.Path, b.Path) })
	return st
}

// ReceivedBytes is the payload bytes this connector claimed (Get and Recv
// hits) over every edge and path: the receiver's side of
// Health().BytesTransferred, which counts only what it put (SPEC §9).
func (s Stats) ReceivedBytes() uint64 {
	var n uint64
	for _, e := range s.Edges {
		for _, b := range e.GetBytes {
			n += b
		}
	}
	return n
}

// MeasureLatency turns the put-latency and receive-wait histograms of
// Stats on or off. Off (the default) the put path reads no clock; on, each
// Put and Recv reads the monotonic clock twice. A metrics collector turns
// it on when it is made.
func (c *SHM) MeasureLatency(on bool) { c.stats.timing.Store(on) }

// stats is the connector's table of edges. The zero value is empty and
// ready.
type stats struct {
	timing atomic.Bool
	// edges is copied on write under mu, so lookups take no lock; it only
	// grows, to MaxStatsEdges and then the overflow edge.
	edges atomic.Pointer[[]*edgeStats]
	mu    sync.Mutex
	rings map[string]scope.RingFile // this connector's ring files, under mu
}

type edgeStats struct {
	from, to       string
	puts, putBytes [NumPaths]atomic.Uint64
	gets, getBytes [NumPaths]atomic.Uint64
	fallbacks      [NumFallbacks]atomic.Uint64
	putLatency     [NumPaths]latency
	recvWait       latency
	recvWaiters    atomic.Int64
	setupFailed    atomic.Bool // the ring refused this edge for good
}

// edge returns the figures of edge from->to, adding it on first use.
func (s *stats) edge(from, to string) *edgeStats {
	if l := s.edges.Load(); l != nil {
		list := *l
		for _, e := range list[:min(len(list), MaxStatsEdges)] {
			if e.from == from && e.to == to {
				return e
			}
		}
		if len(list) > MaxStatsEdges { // full: the last entry takes the rest
			return list[MaxStatsEdges]
		}
	}
	return s.add(from, to)
}

func (s *stats) add(from, to string) *edgeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var list []*edgeStats
	if l := s.edges.Load(); l != nil {
		list = *l
	}
	for _, e := range list {
		if e.from == from && e.to == to {
			return e
		}
	}
	if len(list) == MaxStatsEdges {
		from, to = overflowStage, overflowStage
	}
	// Cloned: a caller's stage string may be part of a larger one.
	e := &edgeStats{from: strings.Clone(from), to: strings.Clone(to)}
	list = append(list[:len(list):len(list)], e)
	s.edges.Store(&list)
	return e
}

// epoch anchors the clock: time.Since of a time with a monotonic reading
// reads only the monotonic clock, cheaper than time.Now.
var epoch = time.Now()

// start is the hook at the top of Put: the clock, or 0 when latency is not
// measured (no clock read at all).
func (s *stats) start() time.Duration {
	if !s.timing.Load() {
		return 0
	}
	return time.Since(epoch)
}

// put is the hook where a Put has published size bytes by path p.
func (s *stats) put(from, to string, p Path, size int, start time.Duration) {
	e := s.edge(from, to)
	e.puts[p].Add(1)
	e.putBytes[p].Add(uint64(size))
	if start != 0 {
		e.putLatency[p].observe(time.Since(epoch) - start)
	}
}

// totals sums the figures Health reports over every edge: publications,
// their bytes, those that took the ring, claims and the ring's claims. (Health
// keeps no counters of its own: a put or a get counts itself once, here.)
func (s *stats) totals() (puts, bytes, ringPuts, gets, ringGets uint64) {
	if l := s.edges.Load(); l != nil {
		for _, e := range *l {
			for p := range NumPaths {
				puts += e.puts[p].Load()
				bytes += e.putBytes[p].Load()
				gets += e.gets[p].Load()
			}
			ringPuts += e.puts[PathRing].Load()
			ringGets += e.gets[PathRing].Load()
		}
	}
	return puts, bytes, ringPuts, gets, ringGets
}

// got is the hook where a Get has claimed size bytes by path p.
func (s *stats) got(from, to string, p Path, size int) {
	e := s.edge(from, to)
	e.gets[p].Add(1)
	e.getBytes[p].Add(uint64(size))
}

// recvStart is what beginRecv hands to endRecv.
type recvStart struct {
	e     *edgeStats
	start time.Duration
}

// beginRecv is the hook at the top of Recv; endRecv, deferred, gets its
// result and the address of Recv's error.
func (s *stats) beginRecv(from, to string) recvStart {
	e := s.edge(from, to)
	e.recvWaiters.Add(1)
	return recvStart{e: e, start: s.start()}
}

func (s *stats) endRecv(r recvStart, err *error) {
	r.e.recvWaiters.Add(-1)
	if r.start != 0 && *err == nil {
		r.e.recvWait.observe(time.Since(epoch) - r.start)
	}
}

// fellBack is the hook where a Put gives up on the ring: it counts why.
// size is the payload's kind-0 size: over the ring's limit, it was too
// large; a tensor frame that fit the limit met a full ring (its kind-0
// form is smaller than the frame).
func (c *SHM) fellBack(from, to, key string, size int) {
	e := c.stats.edge(from, to)
	why := FallbackRingFull
	switch {
	case c.ring.Capacity() == 0:
		why = FallbackRingDisabled
	case !numeric(from) || !numeric(to):
		why = FallbackNonNumericStage
	case size > c.ring.MaxPayload(key):
		why = FallbackFrameTooLarge
	case e.setupFailed.Load():
		why = FallbackSetupFailed
	}
	e.fallbacks[why].Add(1)
}

// ringSetupFailed notes that the ring refused edge from->to for good.
func (s *stats) ringSetupFailed(from, to string) { s.edge(from, to).setupFailed.Store(true) }

// trackRing and forgetRing are the ring's OnCreate and OnRemove: the crash
// watchdog's tracking, and the list of this connector's rings in Stats.
func (c *SHM) trackRing(path string) {
	c.track(path)
	if rn, ok := scope.ParseRingName(os.Getuid(), filepath.Base(path)); ok {
		c.stats.mu.Lock()
		if c.stats.rings == nil {
			c.stats.rings = map[string]scope.RingFile{}
		}
		c.stats.rings[path] = rn
		c.stats.mu.Unlock()
	}
}

func (c *SHM) forgetRing(path string) {
	c.forget(path)
	c.stats.mu.Lock()
	delete(c.stats.rings, path)
	c.stats.mu.Unlock()
}

func (e *edgeStats) snapshot() EdgeStats {
	s := EdgeStats{From: e.from, To: e.to, RecvWait: e.recvWait.snapshot(), RecvWaiters: int(max(e.recvWaiters.Load(), 0))}
	for p := range NumPaths {
		s.Puts[p], s.PutBytes[p] = e.puts[p].Load(), e.putBytes[p].Load()
		s.Gets[p], s.GetBytes[p] = e.gets[p].Load(), e.getBytes[p].Load()
		s.PutLatency[p] = e.putLatency[p].snapshot()
	}
	for f := range NumFallbacks {
		s.Fallbacks[f] = e.fallbacks[f].Load()
	}
	return s
}

// latency is a histogram of durations in power-of-two microsecond buckets:
// finding the bucket is one division and one bit count, no search.
type latency struct {
	counts [LatencyBuckets + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

func (l *latency) observe(d time.Duration) {
	d = max(d, 0)
	us := (uint64(d) + 999) / 1000 // d <= bound i exactly when us <= 2^i
	i := 0
	if us > 1 {
		i = bits.Len64(us - 1)
	}
	l.counts[min(i, LatencyBuckets)].Add(1)
	l.sum.Add(int64(d))
}

func (l *latency) snapshot() Latency {
	var s Latency
	for i := range l.counts {
		s.Counts[i] = l.counts[i].Load()
	}
	s.Sum = time.Duration(l.sum.Load())
	return s
}
