//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"omnishm/internal/shmtest"
	"omnishm/scope"
	"omnishm/shmstate"
)

// exposition is one scrape: each sample's value by "name{k=v,...}", the
// labels sorted by name.
type exposition map[string]float64

// metricKey names a sample as exposition does.
func metricKey(name string, labels map[string]string) string {
	var l []string
	for k, v := range labels {
		l = append(l, k+"="+v)
	}
	slices.Sort(l)
	return name + "{" + strings.Join(l, ",") + "}"
}

// fetch GETs url, failing the test if that takes longer than patience:
// the exporter must never wait on a lock, so it answers at once.
func fetch(t *testing.T, url string) (int, []byte) {
	t.Helper()
	client := http.Client{Timeout: shmtest.Patience}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, b
}

// scrape fetches url and parses the text exposition; the raw bytes are
// returned for the linter.
func scrape(t *testing.T, url string) (exposition, []byte) {
	t.Helper()
	code, raw := fetch(t, url)
	if code != http.StatusOK {
		t.Fatalf("scrape: status %d\n%s", code, raw)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("scrape: %v\n%s", err, raw)
	}
	out := exposition{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, p := range m.GetLabel() {
				labels[p.GetName()] = p.GetValue()
			}
			var v float64
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			default:
				v = m.GetUntyped().GetValue()
			}
			out[metricKey(name, labels)] = v
		}
	}
	return out, raw
}

// want checks one sample.
func (e exposition) want(t *testing.T, key string, v float64) {
	t.Helper()
	got, ok := e[key]
	switch {
	case !ok:
		t.Errorf("no sample %s", key)
	case got != v:
		t.Errorf("%s = %v, want %v", key, got, v)
	}
}

// ringLabels are the labels of a ring's samples.
func ringLabels(sc shmstate.Scope, r shmstate.Ring) map[string]string {
	return map[string]string{"ring_dir": sc.RingDir, "ring": strings.TrimPrefix(r.Name, sc.RingDir+"_"),
		"from": r.From, "to": r.To, "pid": strconv.Itoa(r.PID)}
}

func withLabel(l map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range l {
		out[a] = b
	}
	return out
}

// matchInspect checks a scrape against `inspect --json` of the same scope:
// every ring inspect shows (rings may vanish in between: a killed
// producer's watchdog removes its own), its markers, FIFOs and per-key
// files.
func matchInspect(t *testing.T, e exposition, s string) shmstate.Scope {
	t.Helper()
	r := omnishm(t, nil, "inspect", "--scope", s, "--key-prefix", shmtest.Prefix(), "--json")
	r.wantSuccess(t)
	st := decodeState(t, r.stdout)
	sc := st.Scopes[0]
	for _, r := range sc.Rings {
		l := ringLabels(sc, r)
		if _, ok := e[metricKey("omnishm_shm_ring_capacity_bytes", l)]; !ok {
			continue // created after the scrape
		}
		e.want(t, metricKey("omnishm_shm_ring_capacity_bytes", l), float64(r.Capacity))
		e.want(t, metricKey("omnishm_shm_ring_file_bytes", l), float64(r.FileSize))
		e.want(t, metricKey("omnishm_shm_ring_marker", l), b2f(r.Marker))
		if busy := e[metricKey("omnishm_shm_ring_busy", l)]; busy != b2f(r.Busy) {
			// The scrape and the inspection are two moments: a receiver's
			// claim can hold the ring's lock in one of them. What the lock
			// guards is compared only when both read the ring unlocked.
			continue
		}
		for _, state := range []shmstate.Producer{shmstate.Alive, shmstate.Dead, shmstate.Unknown} {
			e.want(t, metricKey("omnishm_shm_ring_producer", withLabel(l, "state", string(state))), b2f(r.Producer == state))
		}
		if !r.Busy {
			e.want(t, metricKey("omnishm_shm_ring_used_bytes", l), float64(r.Used))
			e.want(t, metricKey("omnishm_shm_ring_ready_frames", l), float64(r.Ready))
			e.want(t, metricKey("omnishm_shm_ring_done_frames", l), float64(r.Done))
			e.want(t, metricKey("omnishm_shm_ring_put_bytes_total", l), float64(r.Head))
		}
	}
	e.want(t, metricKey("omnishm_shm_markers_without_ring", map[string]string{"ring_dir": sc.RingDir}), float64(len(sc.MarkersWithoutRing)))
	fifos := map[[2]string]int{}
	for _, f := range sc.FIFOs {
		fifos[[2]string{f.Stage, strconv.FormatBool(f.Reader)}]++
	}
	for k, n := range fifos {
		e.want(t, metricKey("omnishm_shm_fifos", map[string]string{"ring_dir": sc.RingDir, "stage": k[0], "reader": k[1]}), float64(n))
	}
	var segBytes int64
	for _, s := range st.Segments {
		segBytes += s.Size
	}
	e.want(t, "omnishm_shm_segments{}", float64(len(st.Segments)))
	e.want(t, "omnishm_shm_segment_bytes{}", float64(segBytes))
	e.want(t, "omnishm_shm_lock_files{state=segment_pending}", float64(len(st.Segments)))
	o := st.Orphans()
	e.want(t, "omnishm_shm_orphan_candidates{kind=ring}", float64(o.Rings))
	e.want(t, "omnishm_shm_orphan_ring_bytes{}", float64(o.RingBytes))
	e.want(t, "omnishm_shm_scan_success{}", 1)
	return sc
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// startExporter starts `exporter` on a free loopback port for scope s and
// returns it with its base URL.
func startExporter(t *testing.T, s string) (*cliProc, string) {
	t.Helper()
	p := startCLI(t, nil, "exporter", "--listen", "127.0.0.1:0", "--scope", s, "--key-prefix", shmtest.Prefix())
	line := p.line(t)
	url, ok := strings.CutPrefix(line, "serving ")
	if !ok || !strings.HasSuffix(url, "/metrics") {
		t.Fatalf("exporter said %q", line)
	}
	return p, strings.TrimSuffix(url, "/metrics")
}

// The exporter, scraped over HTTP while producers and a receiver run in
// other processes, shows what `inspect --json` shows; a killed producer's
// ring shows dead with its bytes; a ring whose lock another process holds
// is reported busy without the scrape waiting; the exposition passes the
// linter; SIGTERM stops the exporter cleanly.
func TestExporterMatchesInspect(t *testing.T) {
	s := opsScope(t)
	sweepAfterKills(t, s)
	exporter, base := startExporter(t, s)
	if code, body := fetch(t, base+"/healthz"); code != http.StatusOK || string(body) != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}

	// A ring producer, a per-key producer, and a receiver blocked in Recv.
	ringSender, desc := startRingSender(t, s, shmtest.Key("exp"))
	segKey := shmtest.Key("exp")
	segSender := startCLI(t, []byte(`{"n": 1}`), "send", "--scope", s, "--from", "0", "--to", "1", "--key", segKey, "--ring-bytes", "0", "--wait", "2m")
	if kind := descriptorKind(t, segSender.line(t)); kind != "shm" {
		t.Fatalf("per-key send took %s", kind)
	}
	later := shmtest.Key("exp")
	receiver := startCLI(t, nil, "recv", "--scope", s, "--from", "0", "--to", "1", "--key", later, "--timeout", "2m")
	shmtest.Eventually(t, shmtest.Patience, "the receiver's FIFO", func() bool {
		st, err := shmstate.Scan(shmstate.Options{Scopes: []string{s}})
		return err == nil && slices.ContainsFunc(st.Scopes[0].FIFOs, func(f shmstate.FIFO) bool { return f.Reader })
	})

	e, raw := scrape(t, base+"/metrics")
	sc := matchInspect(t, e, s)
	if len(sc.Rings) != 1 || sc.Rings[0].Ready != 1 || len(sc.FIFOs) == 0 {
		t.Fatalf("inspect shows %+v", sc)
	}
	live := ringLabels(sc, sc.Rings[0])
	e.want(t, metricKey("omnishm_shm_ring_ready_frames", live), 1)
	e.want(t, metricKey("omnishm_shm_ring_producer", withLabel(live, "state", "alive")), 1)
	e.want(t, "omnishm_shm_segments{}", 1)
	problems, err := promlint.New(bytes.NewReader(raw)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	// The receiver gets its payload from a third producer; both leave.
	sender3 := startCLI(t, []byte(`{"n": 3}`), "send", "--scope", s, "--from", "0", "--to", "1", "--key", later, "--wait", "2m")
	sender3.line(t)
	if got := receiver.line(t); !strings.Contains(got, `"n"`) {
		t.Fatalf("receiver printed %q", got)
	}
	receiver.wait(t)
	if code := sender3.wait(t); code != 0 {
		t.Fatalf("third sender: status %d", code)
	}

	// The ring producer killed: the copy of its ring that no watchdog
	// removes is a dead producer's leftover, bytes and ready frame.
	dead := deadCopy(t, s, ringSender, desc.HostRing.Name)
	e, _ = scrape(t, base+"/metrics")
	sc = matchInspect(t, e, s)
	r, ok := findRing(sc, dead)
	if !ok {
		t.Fatalf("no dead copy %s in %+v", dead, sc.Rings)
	}
	dl := ringLabels(sc, r)
	e.want(t, metricKey("omnishm_shm_ring_producer", withLabel(dl, "state", "dead")), 1)
	e.want(t, metricKey("omnishm_shm_ring_file_bytes", dl), float64(r.FileSize))
	e.want(t, metricKey("omnishm_shm_ring_ready_frames", dl), 1)
	if e["omnishm_shm_orphan_candidates{kind=ring}"] < 1 || e["omnishm_shm_orphan_ring_bytes{}"] < float64(r.FileSize) || r.FileSize == 0 {
		t.Errorf("orphans: %v rings, %v bytes; the dead ring has %d", e["omnishm_shm_orphan_candidates{kind=ring}"], e["omnishm_shm_orphan_ring_bytes{}"], r.FileSize)
	}

	// Another process holds the dead ring's lock: the scrape does not wait.
	l := shmtest.HoldLock(t, filepath.Join(scope.ShmDir, dead))
	e, _ = scrape(t, base+"/metrics")
	e.want(t, metricKey("omnishm_shm_ring_busy", dl), 1)
	if _, ok := e[metricKey("omnishm_shm_ring_ready_frames", dl)]; ok {
		t.Error("ready frames of a busy ring exported")
	}
	l.Release(t)

	segSender.signal(syscall.SIGTERM)
	segSender.wait(t)
	exporter.signal(syscall.SIGTERM)
	if code := exporter.wait(t); code != 0 {
		t.Fatalf("exporter after SIGTERM: status %d, stderr %q", code, exporter.errText())
	}
}

func decodeState(t *testing.T, b []byte) shmstate.State {
	t.Helper()
	var st shmstate.State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, b)
	}
	if len(st.Scopes) != 1 {
		t.Fatalf("inspect shows %d scopes", len(st.Scopes))
	}
	return st
}

func TestExporterUsage(t *testing.T) {
	omnishm(t, nil, "exporter", "--scope", "x", "--all").wantFailure(t, exitUsage, "exclude each other")
	omnishm(t, nil, "exporter", "now").wantFailure(t, exitUsage, "unexpected arguments")
	omnishm(t, nil, "exporter", "--listen", "127.0.0.1:99999").wantFailure(t, exitFail, "invalid port")
	r := omnishm(t, nil, "exporter", "--help")
	r.wantSuccess(t)
	if !strings.Contains(string(r.stdout), fmt.Sprintf("(default %q)", defaultListen)) {
		t.Errorf("help: %s", r.stdout)
	}
}
