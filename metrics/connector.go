//go:build linux

package metrics

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"omnishm/connector"
	"omnishm/shmstate"
)

// Source is what a Collector reads: a *connector.SHM, or any transport
// that keeps the same figures.
type Source interface {
	Stats() connector.Stats
}

// latencyMeasurer is a Source whose latency histograms can be turned on.
type latencyMeasurer interface {
	MeasureLatency(on bool)
}

var (
	connectorDescs descs
	edgeLabels     = []string{"from", "to"}
	pathLabels     = []string{"from", "to", "path"}

	putsDesc = connectorDescs.add("omnishm_connector_puts_total",
		"Payloads published on an edge, by the path they took (ring or segment).", pathLabels)
	putBytesDesc = connectorDescs.add("omnishm_connector_put_bytes_total",
		"Payload bytes published on an edge, by path.", pathLabels)
	getsDesc = connectorDescs.add("omnishm_connector_gets_total",
		"Payloads claimed on an edge (Get and Recv hits), by path.", pathLabels)
	getBytesDesc = connectorDescs.add("omnishm_connector_get_bytes_total",
		"Payload bytes claimed on an edge, by path.", pathLabels)
	fallbacksDesc = connectorDescs.add("omnishm_connector_ring_fallbacks_total",
		"Puts that took a per-key segment instead of the host ring, by reason.", []string{"from", "to", "reason"})
	putLatencyDesc = connectorDescs.add("omnishm_connector_put_duration_seconds",
		"How long successful puts took, by path.", pathLabels)
	recvWaitDesc = connectorDescs.add("omnishm_connector_recv_wait_seconds",
		"How long successful receives waited, from the Recv call to its return.", edgeLabels)
	recvWaitersDesc = connectorDescs.add("omnishm_connector_recv_waiters",
		"Receives in progress on an edge.", edgeLabels)
	ownCapacityDesc = connectorDescs.add("omnishm_connector_ring_capacity_bytes",
		"Capacity of a ring this connector produces into.", edgeLabels)
	ownUsedDesc = connectorDescs.add("omnishm_connector_ring_used_bytes",
		"Bytes between tail and head of a ring this connector produces into (frames not reclaimed yet).", edgeLabels)
	ownReadyDesc = connectorDescs.add("omnishm_connector_ring_ready_frames",
		"Frames ready (published, not claimed) in a ring this connector produces into.", edgeLabels)
)

// Collector is a prometheus.Collector of one connector's figures. Counters
// and histograms come from Source.Stats, lock-free; the ring gauges from
// reading each of the connector's own rings (shmstate.ScanRing) under the
// ring lock taken without waiting. A put of the connector that meets a
// scrape's read waits for it (one read of the ring, about a millisecond
// for 4 MiB); a ring whose lock is held shows its last counts.
//
// To register several connectors in one registry, give each its own
// labels: prometheus.WrapRegistererWith(prometheus.Labels{"connector":
// name}, reg).
type Collector struct {
	src Source

	mu   sync.Mutex               // serialises scrapes' use of last
	last map[string]shmstate.Ring // by ring path: counts for a busy ring
}

// NewCollector returns a Collector of src and turns its latency histograms
// on (src.MeasureLatency(true), when src has that method): from then on
// each put and receive reads the monotonic clock twice.
func NewCollector(src Source) *Collector {
	if m, ok := src.(latencyMeasurer); ok {
		m.MeasureLatency(true)
	}
	return &Collector{src: src, last: map[string]shmstate.Ring{}}
}

// Register makes a Collector of src and registers it with reg
// (prometheus.DefaultRegisterer when nil).
func Register(reg prometheus.Registerer, src Source) (*Collector, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	c := NewCollector(src)
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range connectorDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	for _, e := range st.Edges {
		from, to := label(e.From), label(e.To)
		for p := range connector.NumPaths {
			path := p.String()
			counter(ch, putsDesc, e.Puts[p], from, to, path)
			counter(ch, putBytesDesc, e.PutBytes[p], from, to, path)
			counter(ch, getsDesc, e.Gets[p], from, to, path)
			counter(ch, getBytesDesc, e.GetBytes[p], from, to, path)
			ch <- histogram(putLatencyDesc, e.PutLatency[p], from, to, path)
		}
		for f := range connector.NumFallbacks {
			counter(ch, fallbacksDesc, e.Fallbacks[f], from, to, f.String())
		}
		ch <- histogram(recvWaitDesc, e.RecvWait, from, to)
		gauge(ch, recvWaitersDesc, float64(e.RecvWaiters), from, to)
	}
	c.collectRings(ch, st.Rings)
}

func (c *Collector) collectRings(ch chan<- prometheus.Metric, rings []connector.RingFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, rf := range rings {
		r, err := shmstate.ScanRing(rf.Path, shmstate.Options{})
		if err != nil || r.Capacity == 0 {
			continue // removed meanwhile, or its header is not written yet
		}
		seen[rf.Path] = true
		if r.Busy {
			if last, ok := c.last[rf.Path]; ok {
				r.Used, r.Ready = last.Used, last.Ready
			}
		} else {
			c.last[rf.Path] = r
		}
		from, to := label(rf.From), label(rf.To)
		gauge(ch, ownCapacityDesc, float64(r.Capacity), from, to)
		gauge(ch, ownUsedDesc, float64(r.Used), from, to)
		gauge(ch, ownReadyDesc, float64(r.Ready), from, to)
	}
	for path := range c.last {
		if !seen[path] {
			delete(c.last, path)
		}
	}
}

// descs is a collector's descriptors, each listed as it is declared so
// that Describe cannot miss one.
type descs []*prometheus.Desc

func (l *descs) add(name, help string, labels []string) *prometheus.Desc {
	d := prometheus.NewDesc(name, help, labels, nil)
	*l = append(*l, d)
	return d
}

// histogram turns a connector.Latency into a Prometheus histogram in
// seconds, its buckets cumulative.
func histogram(d *prometheus.Desc, l connector.Latency, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, connector.LatencyBuckets)
	var cum uint64
	for i := range connector.LatencyBuckets {
		cum += l.Counts[i]
		buckets[connector.LatencyBound(i).Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(d, cum+l.Counts[connector.LatencyBuckets], l.Sum.Seconds(), buckets, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// label makes a string a valid label value: stage strings of non-numeric
// edges are the callers', and need not be UTF-8.
func label(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
