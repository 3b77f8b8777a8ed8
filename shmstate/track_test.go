//go:build linux

package shmstate

import (
	"testing"
	"time"
)

// trackedRing is a ring as Scan reads it, with its live window.
func trackedRing(name string, head, tail uint64, frames ...frameMark) Ring {
	r := Ring{Name: name, From: "0", To: "1", CreatorStart: 7, Capacity: 4096, Head: head, Tail: tail, Used: head - tail, read: true, frames: frames}
	for _, f := range frames {
		switch {
		case f.padding:
		case f.done:
			r.Done++
		default:
			r.Ready++
		}
	}
	return r
}

func ready(pos uint64, total int) frameMark { return frameMark{pos: pos, total: total} }
func done(pos uint64, total int) frameMark  { return frameMark{pos: pos, total: total, done: true} }

func stateOf(rings ...Ring) *State { return &State{Scopes: []Scope{{Rings: rings}}} }

// Successive scans give each ring's puts and claims in between, exactly
// while the window covers them and estimated from bytes once the producer
// reclaimed some, and the age of the oldest ready frame since first seen.
func TestTrackerActivityAndAges(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type want struct {
		activity    *Activity
		oldestReady time.Duration
	}
	steps := []struct {
		name string
		at   time.Duration
		ring Ring
		want want
	}{
		{"first scan: nothing to compare", 0,
			trackedRing("a", 64, 0, ready(0, 32), ready(32, 32)),
			want{nil, 0}},
		{"frame 0 claimed and reclaimed, two put, one of them claimed", 2 * time.Second,
			trackedRing("a", 160, 32, ready(32, 32), done(64, 32), ready(96, 64)),
			want{&Activity{Interval: Age(2 * time.Second), Puts: 2, Claims: 2, PutBytes: 96}, 2 * time.Second}},
		{"busy: the last known oldest", 3 * time.Second,
			Ring{Name: "a", CreatorStart: 7, Busy: true},
			want{nil, 3 * time.Second}},
		{"the window moved past the last head: 4 frames estimated", 4 * time.Second,
			trackedRing("a", 400, 352, ready(352, 48)),
			// Since the scan at 2 s: 192 bytes reclaimed unseen at 48 a frame.
			want{&Activity{Interval: Age(2 * time.Second), Puts: 5, Claims: 6, PutBytes: 240, Estimated: true}, 0}},
		{"still ready", 5 * time.Second,
			trackedRing("a", 400, 352, ready(352, 48)),
			want{&Activity{Interval: Age(time.Second)}, time.Second}},
		{"a new producer under the name starts over", 6 * time.Second,
			func() Ring { r := trackedRing("a", 32, 0, ready(0, 32)); r.CreatorStart = 8; return r }(),
			want{&Activity{Interval: Age(time.Second), Puts: 1, PutBytes: 32}, 0}},
	}
	var tr Tracker
	for _, s := range steps {
		st := stateOf(s.ring)
		tr.observe(st, t0.Add(s.at))
		r := st.Scopes[0].Rings[0]
		if (r.Activity == nil) != (s.want.activity == nil) || r.Activity != nil && *r.Activity != *s.want.activity {
			t.Errorf("%s: activity %+v, want %+v", s.name, r.Activity, s.want.activity)
		}
		if time.Duration(r.OldestReady) != s.want.oldestReady {
			t.Errorf("%s: oldest ready %v, want %v", s.name, time.Duration(r.OldestReady), s.want.oldestReady)
		}
	}
	// A ring gone from a scan is forgotten; one that appears is compared
	// with the empty ring it was at the previous scan.
	tr.observe(stateOf(), t0.Add(7*time.Second))
	if len(tr.rings) != 0 {
		t.Fatalf("tracker remembers %d rings after they are gone", len(tr.rings))
	}
	st := stateOf(trackedRing("b", 96, 32, done(32, 32), ready(64, 32)))
	tr.observe(st, t0.Add(8*time.Second))
	if a := st.Scopes[0].Rings[0].Activity; a == nil || *a != (Activity{Interval: Age(time.Second), Puts: 3, Claims: 2, PutBytes: 96, Estimated: true}) {
		t.Fatalf("new ring's activity %+v", a)
	}
}

func TestEdgesSumRings(t *testing.T) {
	a := trackedRing("a", 64, 0, ready(0, 32), ready(32, 32))
	a.Activity = &Activity{Interval: Age(2 * time.Second), Puts: 4, Claims: 2, PutBytes: 128}
	b := trackedRing("b", 32, 0, ready(0, 32))
	b.Producer = Dead
	b.Activity = &Activity{Interval: Age(time.Second), Puts: 1, Estimated: true}
	c := Ring{Name: "c", From: "0", To: "1", Capacity: 4096, Busy: true}
	d := trackedRing("d", 0, 0)
	d.From, d.To = "10", "2"
	e := trackedRing("e", 0, 0)
	e.From, e.To = "2", "10"
	got := Scope{Rings: []Ring{d, a, b, c, e}}.Edges()
	if len(got) != 3 || got[0].From != "0" || got[1].From != "2" || got[2].From != "10" {
		t.Fatalf("edges %+v, want 0->1, 2->10, 10->2", got)
	}
	want := EdgeSummary{From: "0", To: "1", Rings: 3, Dead: 1, Busy: 1, Capacity: 3 * 4096, Used: 96, Ready: 3,
		Active: 2, PutRate: 3, ClaimRate: 1, PutByteRate: 64, Estimated: true}
	if got[0] != want {
		t.Fatalf("edge %+v\nwant %+v", got[0], want)
	}
}
