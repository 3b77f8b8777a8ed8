//go:build linux

package shmstate

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// This file is what successive scans tell that one scan cannot: how long
// each ready frame has waited (frames carry no time stamp, SPEC §3) and
// what each ring did in between. Ring positions are monotonic, so a frame
// is named by its ring and position, and head's advance is exactly the
// bytes put. It only reads States; Tracker.Scan (track_linux.go) feeds it.

// Activity is what one ring did between two of a Tracker's scans.
type Activity struct {
	Interval Age `json:"interval_s"`
	// Puts are the frames published (head moved over them). Claims are the
	// frames that turned done: claimed by a receiver or retired by their
	// producer (a re-put of the key, a cleanup), which the ring does not
	// tell apart.
	Puts   int `json:"puts"`
	Claims int `json:"claims"`
	// PutBytes is how far head moved: frame headers, keys and padding
	// included. Exact even when Estimated.
	PutBytes uint64 `json:"put_bytes"`
	// Estimated: some frames were put and reclaimed between the scans, so
	// their number is estimated from the bytes they covered and the mean
	// frame size seen.
	Estimated bool `json:"estimated,omitempty"`
}

// PutRate is Puts per second over the interval, 0 for an empty interval.
func (a Activity) PutRate() float64 { return a.perSecond(float64(a.Puts)) }

// ClaimRate is Claims per second.
func (a Activity) ClaimRate() float64 { return a.perSecond(float64(a.Claims)) }

// PutByteRate is PutBytes per second.
func (a Activity) PutByteRate() float64 { return a.perSecond(float64(a.PutBytes)) }

func (a Activity) perSecond(n float64) float64 {
	if a.Interval <= 0 {
		return 0
	}
	return n / time.Duration(a.Interval).Seconds()
}

// frameMark is one frame of a ring's live window, as a Tracker needs it.
type frameMark struct {
	pos     uint64
	total   int
	done    bool
	padding bool
}

// Tracker scans repeatedly with one Options and remembers what earlier
// scans saw, to fill Ring.OldestReady and Ring.Activity. The zero value is
// ready; it is safe for concurrent use (scans are serialised).
type Tracker struct {
	mu    sync.Mutex
	last  time.Time // the previous scan; zero before the first
	rings map[string]*ringMemo
}

// ringMemo is what the last scan that could read a ring saw of it.
type ringMemo struct {
	creatorStart uint64
	at           time.Time
	head         uint64
	ready        map[uint64]time.Time // ready frame positions -> first seen
	meanTotal    float64              // of the payload frames seen, for estimates
}

// observe fills st's OldestReady and Activity from what earlier calls saw,
// and remembers st. now is when st was read.
func (t *Tracker) observe(st *State, now time.Time) {
	if t.rings == nil {
		t.rings = map[string]*ringMemo{}
	}
	seen := map[string]bool{}
	for si := range st.Scopes {
		for ri := range st.Scopes[si].Rings {
			r := &st.Scopes[si].Rings[ri]
			seen[r.Name] = true
			m := t.rings[r.Name]
			if m != nil && (m.creatorStart != r.CreatorStart || r.read && r.Head < m.head) {
				m = nil // another ring under the name: start over
			}
			if !r.read {
				// Busy or unreadable: keep what we knew, report its oldest.
				if m != nil {
					r.OldestReady = oldestSince(m.ready, now)
				}
				continue
			}
			var act *Activity
			if m == nil && !t.last.IsZero() {
				// New since the last scan: it was empty then.
				m = &ringMemo{at: t.last}
			}
			next := &ringMemo{creatorStart: r.CreatorStart, at: now, head: r.Head, ready: map[uint64]time.Time{}}
			if m != nil {
				act = &Activity{Interval: Age(now.Sub(m.at)), PutBytes: r.Head - m.head}
				next.meanTotal = m.meanTotal
			}
			var sum, n int
			for _, f := range r.frames {
				if f.padding {
					continue
				}
				sum, n = sum+f.total, n+1
				if act != nil && f.pos >= m.head {
					act.Puts++
					if f.done {
						act.Claims++
					}
				}
				if !f.done {
					first := now
					if m != nil {
						if t0, ok := m.ready[f.pos]; ok {
							first = t0
						}
					}
					next.ready[f.pos] = first
				}
			}
			if n > 0 {
				next.meanTotal = float64(sum) / float64(n)
			}
			if act != nil {
				for pos := range m.ready {
					if _, still := next.ready[pos]; !still {
						act.Claims++
					}
				}
				// Frames put after the last scan and already reclaimed (only
				// done frames are): counted from the bytes they covered.
				if r.Tail > m.head {
					hidden := 1
					if next.meanTotal > 0 {
						hidden = max(1, int(math.Round(float64(r.Tail-m.head)/next.meanTotal)))
					}
					act.Puts += hidden
					act.Claims += hidden
					act.Estimated = true
				}
			}
			r.Activity = act
			r.OldestReady = oldestSince(next.ready, now)
			t.rings[r.Name] = next
		}
	}
	for name := range t.rings {
		if !seen[name] {
			delete(t.rings, name)
		}
	}
	t.last = now
}

func oldestSince(ready map[uint64]time.Time, now time.Time) Age {
	var oldest time.Time
	for _, t0 := range ready {
		if oldest.IsZero() || t0.Before(oldest) {
			oldest = t0
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return Age(now.Sub(oldest))
}

// EdgeSummary sums one scope's rings of one edge.
type EdgeSummary struct {
	From, To string
	// Rings counts the edge's ring files, Dead those whose producer is dead;
	// Busy those whose lock was held, so their occupancy is not summed.
	Rings, Dead, Busy int
	Capacity, Used    uint64
	Ready             int
	// The rates are summed over the rings a Tracker saw twice (Active).
	Active                          int
	PutRate, ClaimRate, PutByteRate float64
	Estimated                       bool
}

// Edges sums the scope's rings by edge, ordered by from then to stage.
func (sc Scope) Edges() []EdgeSummary {
	var out []EdgeSummary
	index := map[[2]string]int{}
	for _, r := range sc.Rings {
		k := [2]string{r.From, r.To}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, EdgeSummary{From: r.From, To: r.To})
		}
		e := &out[i]
		e.Rings++
		e.Capacity += r.Capacity
		if r.Producer == Dead {
			e.Dead++
		}
		if r.Busy {
			e.Busy++
		} else {
			e.Used += r.Used
			e.Ready += r.Ready
		}
		if a := r.Activity; a != nil {
			e.Active++
			e.PutRate += a.PutRate()
			e.ClaimRate += a.ClaimRate()
			e.PutByteRate += a.PutByteRate()
			e.Estimated = e.Estimated || a.Estimated
		}
	}
	slices.SortFunc(out, func(a, b EdgeSummary) int {
		return cmp.Or(cmpStages(a.From, b.From), cmpStages(a.To, b.To))
	})
	return out
}

// cmpStages orders decimal stage ids by value: "2" before "10".
func cmpStages(a, b string) int {
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// Orphaned reports whether the ring is abandoned: its producer is dead
// (SPEC §7), so Prune would remove it. "Unknown" is not dead.
func (r Ring) Orphaned() bool { return r.Producer == Dead }

// Orphaned reports whether the FIFO is abandoned: no process reads it.
func (f FIFO) Orphaned() bool { return !f.Reader }

// Orphaned reports whether the sleepers file's receiver is gone, as far as
// a scan can tell: its FIFO is gone or has no reader. Prune re-checks
// (see Prune).
func (s Sleepers) Orphaned() bool { return !s.Reader }

// Orphans counts what Prune would consider in a State, before its re-checks
// under non-blocking locks: rings of dead producers (with their file
// bytes), markers without rings, orphan lock files, FIFOs without
// readers and sleepers files whose FIFO has none or is gone.
type Orphans struct {
	Rings     int   `json:"rings"`
	RingBytes int64 `json:"ring_bytes"`
	Markers   int   `json:"markers"`
	Locks     int   `json:"locks"`
	FIFOs     int   `json:"fifos"`
	Sleepers  int   `json:"sleepers"`
}

// Orphans counts st's orphan candidates.
func (st *State) Orphans() Orphans {
	var o Orphans
	for _, sc := range st.Scopes {
		for _, r := range sc.Rings {
			if r.Orphaned() {
				o.Rings++
				o.RingBytes += r.FileSize
			}
		}
		o.Markers += len(sc.MarkersWithoutRing)
		for _, f := range sc.FIFOs {
			if f.Orphaned() {
				o.FIFOs++
			}
		}
		for _, s := range sc.Sleepers {
			if s.Orphaned() {
				o.Sleepers++
			}
		}
	}
	for _, l := range st.Locks {
		if l.Orphan {
			o.Locks++
		}
	}
	return o
}
