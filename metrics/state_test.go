//go:build linux

package metrics_test

import (
	"strconv"
	"strings"
	"testing"

	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/metrics"
	"omnishm/ring"
	"omnishm/shmstate"
)

// The state collector shows what shmstate.Scan reads: a ring's occupancy
// and producer, a pending segment with its lock file, the receiver's FIFO;
// a frame that stays ready ages from one scrape to the next.
func TestStateCollectorMatchesScan(t *testing.T) {
	s := shmtest.Scope(t)
	sender, receiver := conntest.Open(t, s, "0", ring.MinCapacity), conntest.Open(t, s, "1", ring.MinCapacity)
	conntest.MustPut(t, sender, "0", "1", shmtest.Key("st"), conntest.Codes(3, 0))
	claimed := shmtest.Key("st")
	conntest.MustPut(t, sender, "0", "1", claimed, conntest.Codes(3, 1))
	conntest.MustGet(t, receiver, "0", "1", claimed, nil)
	big := conntest.MustPut(t, sender, "0", "1", shmtest.Key("st"), conntest.Codes(4096, 0))

	o := shmstate.Options{Scopes: []string{s}, KeyPrefix: shmtest.Prefix()}
	c := metrics.NewStateCollector(o)
	first := gather(t, c)
	st, err := shmstate.Scan(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Scopes) != 1 || len(st.Scopes[0].Rings) != 1 {
		t.Fatalf("scan: %+v", st)
	}
	sc, r := st.Scopes[0], st.Scopes[0].Rings[0]
	ringLabels := "{from=0,pid=" + strconv.Itoa(r.PID) + ",ring=" + strings.TrimPrefix(r.Name, sc.RingDir+"_") + ",ring_dir=" + sc.RingDir
	producer := ringLabels + ",state="
	ringLabels += ",to=1"
	for key, v := range map[string]float64{
		"omnishm_shm_ring_capacity_bytes" + ringLabels + "}":                 float64(r.Capacity),
		"omnishm_shm_ring_file_bytes" + ringLabels + "}":                     float64(r.FileSize),
		"omnishm_shm_ring_used_bytes" + ringLabels + "}":                     float64(r.Used),
		"omnishm_shm_ring_ready_frames" + ringLabels + "}":                   1,
		"omnishm_shm_ring_done_frames" + ringLabels + "}":                    1,
		"omnishm_shm_ring_producer" + producer + "alive,to=1}":               1,
		"omnishm_shm_ring_producer" + producer + "dead,to=1}":                0,
		"omnishm_shm_ring_busy" + ringLabels + "}":                           0,
		"omnishm_shm_ring_marker" + ringLabels + "}":                         1,
		"omnishm_shm_ring_oldest_ready_age_seconds" + ringLabels + "}":       0,
		"omnishm_shm_markers_without_ring{ring_dir=" + sc.RingDir + "}":      0,
		"omnishm_shm_fifos{reader=true,ring_dir=" + sc.RingDir + ",stage=1}": 1,
		"omnishm_shm_segments{}":                                             1,
		"omnishm_shm_segment_bytes{}":                                        float64(big.Size),
		"omnishm_shm_lock_files{state=segment_pending}":                      1,
		"omnishm_shm_lock_files{state=orphan}":                               0,
		"omnishm_shm_orphan_candidates{kind=ring}":                           0,
		"omnishm_shm_scan_success{}":                                         1,
	} {
		if got := metric(t, first, key).GetGauge().GetValue(); got != v {
			t.Errorf("%s = %v, want %v", key, got, v)
		}
	}
	for key, v := range map[string]float64{
		"omnishm_shm_ring_put_bytes_total" + ringLabels + "}":       float64(r.Head),
		"omnishm_shm_ring_reclaimed_bytes_total" + ringLabels + "}": float64(r.Tail),
		"omnishm_shm_scan_errors_total{}":                           0,
	} {
		if got := metric(t, first, key).GetCounter().GetValue(); got != v {
			t.Errorf("%s = %v, want %v", key, got, v)
		}
	}
	if age := metric(t, gather(t, c), "omnishm_shm_ring_oldest_ready_age_seconds"+ringLabels+"}").GetGauge().GetValue(); age <= 0 {
		t.Errorf("the ready frame's age on the second scrape is %v", age)
	}
}

// While another process holds a ring's lock, a scrape returns at once and
// shows the ring busy, without the counts it could not read.
func TestStateCollectorNeverWaitsForARingLock(t *testing.T) {
	s := shmtest.Scope(t)
	sender := conntest.Open(t, s, "0", ring.MinCapacity)
	d := conntest.MustPut(t, sender, "0", "1", shmtest.Key("held"), conntest.Codes(3, 0))
	l := conntest.HoldRing(t, d)
	defer l.Release(t)
	ms := gather(t, metrics.NewStateCollector(shmstate.Options{Scopes: []string{s}}))
	busy := 0
	for key, m := range ms {
		switch {
		case strings.HasPrefix(key, "omnishm_shm_ring_busy{"):
			busy += int(m.GetGauge().GetValue())
		case strings.HasPrefix(key, "omnishm_shm_ring_ready_frames{"), strings.HasPrefix(key, "omnishm_shm_ring_used_bytes{"):
			t.Errorf("%s exported while the ring is busy", key)
		}
	}
	if busy != 1 {
		t.Fatalf("%d busy rings, want 1", busy)
	}
}
