//go:build linux

package metrics_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/metrics"
	"omnishm/ring"
	"omnishm/shmstate"
)

// gather collects c alone and indexes its metrics by name and labels
// ("name{k=v,...}", labels sorted as the registry sorts them).
func gather(t *testing.T, c prometheus.Collector) map[string]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Metric{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var l []string
			for _, p := range m.GetLabel() {
				l = append(l, p.GetName()+"="+p.GetValue())
			}
			out[f.GetName()+"{"+strings.Join(l, ",")+"}"] = m
		}
	}
	return out
}

func metric(t *testing.T, ms map[string]*dto.Metric, key string) *dto.Metric {
	t.Helper()
	m, ok := ms[key]
	if !ok {
		keys := make([]string, 0, len(ms))
		for k := range ms {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Fatalf("no metric %s among\n%s", key, strings.Join(keys, "\n"))
	}
	return m
}

const (
	putsHelp      = "# HELP omnishm_connector_puts_total Payloads published on an edge, by the path they took (ring or segment).\n# TYPE omnishm_connector_puts_total counter\n"
	fallbacksHelp = "# HELP omnishm_connector_ring_fallbacks_total Puts that took a per-key segment instead of the host ring, by reason.\n# TYPE omnishm_connector_ring_fallbacks_total counter\n"
	getsHelp      = "# HELP omnishm_connector_gets_total Payloads claimed on an edge (Get and Recv hits), by path.\n# TYPE omnishm_connector_gets_total counter\n"
)

// After puts by both paths, fallbacks for two reasons, gets and a Recv,
// the collectors of both ends show each count on its edge and path, the
// latency histograms count each timed call, and the sender's ring gauges
// match what shmstate reads of the ring.
func TestCollectorAfterPutsGetsAndFallbacks(t *testing.T) {
	sender, receiver := conntest.Edge(t, ring.MinCapacity)
	sent, got := metrics.NewCollector(sender), metrics.NewCollector(receiver)
	keys := []string{shmtest.Key("m"), shmtest.Key("m"), shmtest.Key("m"), shmtest.Key("m")}
	var sizes []int
	for i, p := range []struct {
		from    string
		payload any
	}{{"0", conntest.Codes(3, 0)}, {"0", conntest.Codes(3, 1)}, {"0", conntest.Codes(4096, 0)}, {"encoder", conntest.Codes(3, 2)}} {
		n, _, err := sender.Put(p.from, "1", keys[i], p.payload)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, n)
	}
	conntest.MustGet(t, receiver, "0", "1", keys[0], nil)
	conntest.MustGet(t, receiver, "0", "1", keys[2], nil)
	conntest.MustGet(t, receiver, "encoder", "1", keys[3], nil)

	want := putsHelp + `omnishm_connector_puts_total{from="0",path="ring",to="1"} 2
omnishm_connector_puts_total{from="0",path="segment",to="1"} 1
omnishm_connector_puts_total{from="encoder",path="ring",to="1"} 0
omnishm_connector_puts_total{from="encoder",path="segment",to="1"} 1
` + fallbacksHelp
	for _, from := range []string{"0", "encoder"} {
		for f := range connector.NumFallbacks {
			n := 0
			if from == "0" && f == connector.FallbackFrameTooLarge || from == "encoder" && f == connector.FallbackNonNumericStage {
				n = 1
			}
			want += fmt.Sprintf("omnishm_connector_ring_fallbacks_total{from=%q,reason=%q,to=\"1\"} %d\n", from, f, n)
		}
	}
	if err := testutil.CollectAndCompare(sent, strings.NewReader(want), "omnishm_connector_puts_total", "omnishm_connector_ring_fallbacks_total"); err != nil {
		t.Fatal(err)
	}

	// The receiver claims the fourth payload with a Recv: timed as a wait.
	if _, _, err := receiver.Recv(context.Background(), "0", keys[1]); err != nil {
		t.Fatal(err)
	}
	want = getsHelp + `omnishm_connector_gets_total{from="0",path="ring",to="1"} 2
omnishm_connector_gets_total{from="0",path="segment",to="1"} 1
omnishm_connector_gets_total{from="encoder",path="ring",to="1"} 0
omnishm_connector_gets_total{from="encoder",path="segment",to="1"} 1
`
	if err := testutil.CollectAndCompare(got, strings.NewReader(want), "omnishm_connector_gets_total"); err != nil {
		t.Fatal(err)
	}

	s := gather(t, sent)
	for key, v := range map[string]float64{
		"omnishm_connector_put_bytes_total{from=0,path=ring,to=1}":          float64(sizes[0] + sizes[1]),
		"omnishm_connector_put_bytes_total{from=0,path=segment,to=1}":       float64(sizes[2]),
		"omnishm_connector_put_bytes_total{from=encoder,path=segment,to=1}": float64(sizes[3]),
	} {
		if got := metric(t, s, key).GetCounter().GetValue(); got != v {
			t.Errorf("%s = %v, want %v", key, got, v)
		}
	}
	for key, n := range map[string]uint64{
		"omnishm_connector_put_duration_seconds{from=0,path=ring,to=1}":          2,
		"omnishm_connector_put_duration_seconds{from=0,path=segment,to=1}":       1,
		"omnishm_connector_put_duration_seconds{from=encoder,path=segment,to=1}": 1,
		"omnishm_connector_put_duration_seconds{from=encoder,path=ring,to=1}":    0,
	} {
		h := metric(t, s, key).GetHistogram()
		if h.GetSampleCount() != n || n > 0 && h.GetSampleSum() <= 0 {
			t.Errorf("%s: count %d sum %v, want %d", key, h.GetSampleCount(), h.GetSampleSum(), n)
		}
		if b := h.GetBucket(); len(b) != connector.LatencyBuckets || b[len(b)-1].GetCumulativeCount() > h.GetSampleCount() {
			t.Errorf("%s: buckets %v", key, b)
		}
	}
	r := gather(t, got)
	if h := metric(t, r, "omnishm_connector_recv_wait_seconds{from=0,to=1}").GetHistogram(); h.GetSampleCount() != 1 {
		t.Errorf("recv waits %d, want 1", h.GetSampleCount())
	}
	if w := metric(t, r, "omnishm_connector_recv_waiters{from=0,to=1}").GetGauge().GetValue(); w != 0 {
		t.Errorf("recv waiters %v", w)
	}

	// The sender's one ring: as shmstate reads it.
	rings := sender.Stats().Rings
	if len(rings) != 1 {
		t.Fatalf("sender rings %+v", rings)
	}
	want2, err := shmstate.ScanRing(rings[0].Path, shmstate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range map[string]float64{
		"omnishm_connector_ring_capacity_bytes{from=0,to=1}": float64(ring.MinCapacity),
		"omnishm_connector_ring_used_bytes{from=0,to=1}":     float64(want2.Used),
		"omnishm_connector_ring_ready_frames{from=0,to=1}":   0,
	} {
		if got := metric(t, s, key).GetGauge().GetValue(); got != v {
			t.Errorf("%s = %v, want %v", key, got, v)
		}
	}
	if want2.Used == 0 || want2.Ready != 0 || want2.Done != 2 {
		t.Errorf("ring as shmstate reads it: %+v", want2)
	}
}

// A ring whose lock another process holds is not waited on: the scrape
// shows the counts of the scrape before.
func TestCollectorBusyRingKeepsLastCounts(t *testing.T) {
	sender, _ := conntest.Edge(t, ring.MinCapacity)
	c := metrics.NewCollector(sender)
	d := conntest.MustPut(t, sender, "0", "1", shmtest.Key("busy"), conntest.Codes(3, 0))
	before := metric(t, gather(t, c), "omnishm_connector_ring_ready_frames{from=0,to=1}").GetGauge().GetValue()
	if before != 1 {
		t.Fatalf("ready frames %v, want 1", before)
	}
	l := conntest.HoldRing(t, d)
	defer l.Release(t)
	if after := metric(t, gather(t, c), "omnishm_connector_ring_ready_frames{from=0,to=1}").GetGauge().GetValue(); after != before {
		t.Fatalf("ready frames while busy %v, want the last %v", after, before)
	}
}

// The exposition of both collectors passes the client library's linter.
func TestCollectorsLint(t *testing.T) {
	s := shmtest.Scope(t)
	sender, receiver := conntest.Open(t, s, "0", ring.MinCapacity), conntest.Open(t, s, "1", ring.MinCapacity)
	key := shmtest.Key("lint")
	conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 0))
	conntest.MustPut(t, sender, "0", "1", shmtest.Key("lint"), conntest.Codes(4096, 0))
	conntest.MustGet(t, receiver, "0", "1", key, nil)
	reg := prometheus.NewPedanticRegistry()
	if _, err := metrics.Register(prometheus.WrapRegistererWith(prometheus.Labels{"connector": "sender"}, reg), sender); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.Register(prometheus.WrapRegistererWith(prometheus.Labels{"connector": "receiver"}, reg), receiver); err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(metrics.NewStateCollector(shmstate.Options{Scopes: []string{s}, KeyPrefix: shmtest.Prefix()}))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Fatalf("gathered %d metrics, %v", n, err)
	}
}
