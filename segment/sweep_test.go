//go:build linux

package segment

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// Locks lists lock files and judges orphans; Sweep removes orphans and,
// when asked, old segments, each after a re-check under its lock.

// sweepDir is a directory of per-key files as crashed peers leave them.
type sweepDir struct {
	dir string
	now time.Time
	old time.Time // older than OrphanGrace
}

func newSweepDir(t *testing.T) sweepDir {
	now := time.Now()
	return sweepDir{dir: t.TempDir(), now: now, old: now.Add(-2 * OrphanGrace)}
}

// lock makes key's lock file, last changed at mtime, and returns its path.
func (d sweepDir) lock(t *testing.T, key string, mtime time.Time) string {
	t.Helper()
	return shmtest.WriteFileAt(t, d.dir+"/"+scope.LockName(key), nil, mtime)
}

func (d sweepDir) segment(t *testing.T, key string, mtime time.Time) string {
	t.Helper()
	return shmtest.WriteFileAt(t, d.dir+"/"+key, []byte("payload"), mtime)
}

func (d sweepDir) options() ListOptions { return ListOptions{Dir: d.dir, Now: d.now} }

func sweptPaths(s []Swept) []string { return shmtest.Map(s, func(x Swept) string { return x.Path }) }

func TestLocks(t *testing.T) {
	d := newSweepDir(t)
	d.lock(t, "orphan", d.old)
	d.lock(t, "young", d.now)
	d.lock(t, "live", d.old)
	d.segment(t, "live", d.old)
	d.lock(t, "other_1", d.old)
	shmtest.WriteFileAt(t, d.dir+"/shm_x_lockfile", nil, d.old) // not a lock file name
	// A lock beside a ring file: the ring is no segment, and no orphan either.
	ring := scope.ForUID(os.Geteuid(), "s", 1).EdgePrefix("0", "1") + "42_aa"
	d.lock(t, ring, d.old)
	shmtest.WriteFileAt(t, d.dir+"/"+ring, []byte("ring"), d.old)

	locks, err := Locks(d.options())
	if err != nil {
		t.Fatal(err)
	}
	type state struct{ segment, orphan bool }
	got := map[string]state{}
	for _, l := range locks {
		got[l.Key] = state{l.Segment, l.Orphan}
		if l.Path != d.dir+"/"+scope.LockName(l.Key) {
			t.Errorf("%s: path %s", l.Key, l.Path)
		}
	}
	want := map[string]state{
		"orphan":  {false, true},
		"young":   {false, false},
		"live":    {true, false},
		"other_1": {false, true},
		ring:      {false, false},
	}
	if len(got) != len(want) {
		t.Fatalf("locks %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
	for _, l := range locks {
		if l.Key == "live" && (l.SegmentSize != int64(len("payload")) || !l.SegmentModTime.Equal(d.old)) {
			t.Errorf("live segment: %d bytes, %v", l.SegmentSize, l.SegmentModTime)
		}
	}
	// Match selects keys; a later Now or a shorter Grace makes orphans.
	o := d.options()
	o.Match = func(k string) bool { return strings.HasPrefix(k, "o") && k != ring }
	o.Grace = time.Nanosecond
	locks, err = Locks(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 2 || !locks[0].Orphan || !locks[1].Orphan {
		t.Fatalf("matched %+v", locks)
	}
	o = d.options()
	o.Now = d.now.Add(time.Hour)
	locks, _ = Locks(o)
	for _, l := range locks {
		if l.Key == "young" && !l.Orphan {
			t.Error("young lock not an orphan an hour later")
		}
	}
}

func TestSweepOrphans(t *testing.T) {
	d := newSweepDir(t)
	orphan := d.lock(t, "orphan", d.old)
	young := d.lock(t, "young", d.now)
	live := d.lock(t, "live", d.old)
	d.segment(t, "live", d.old)
	held := d.lock(t, "held", d.old)
	stranger := shmtest.WriteFileAt(t, d.dir+"/shm_x_lockfile", nil, d.old)

	holder := shmtest.HoldLock(t, held)
	rep, err := Sweep(SweepOptions{ListOptions: d.options()})
	if err != nil {
		t.Fatal(err)
	}
	if got := sweptPaths(rep.Removed); !slices.Equal(got, []string{orphan}) {
		t.Fatalf("removed %v, want only %s", got, orphan)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0] != (Swept{"held", held, "lock", "lock held"}) {
		t.Fatalf("skipped %+v, want the held lock", rep.Skipped)
	}
	shmtest.AssertPresent(t, young, live, held, stranger)
	holder.Release(t)
	// Released and still old: now it is an orphan. A shorter grace takes
	// the young one as well.
	shmtest.SetMtime(t, young, d.old)
	o := d.options()
	o.Grace = time.Minute
	rep, err = Sweep(SweepOptions{ListOptions: o})
	if got := sweptPaths(rep.Removed); err != nil || !slices.Equal(got, []string{held, young}) {
		t.Fatalf("second sweep removed %v (%v), want held and young", got, err)
	}
	shmtest.AssertPresent(t, live, stranger)
}

// A dry run takes the same locks and reports the same, removing nothing.
func TestSweepDryRun(t *testing.T) {
	d := newSweepDir(t)
	orphan := d.lock(t, "orphan", d.old)
	seg := d.segment(t, "old", d.old)
	oldLock := d.lock(t, "old", d.old)
	held := d.lock(t, "held", d.old)
	holder := shmtest.HoldLock(t, held)
	defer holder.Release(t)
	o := SweepOptions{ListOptions: d.options(), SegmentsOlderThan: time.Second}
	var reports []SweepReport
	for _, dry := range []bool{true, false} {
		o.DryRun = dry
		rep, err := Sweep(o)
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, rep)
		if dry {
			shmtest.AssertPresent(t, orphan, seg, oldLock, held)
		}
	}
	shmtest.AssertAbsent(t, orphan, seg, oldLock)
	shmtest.AssertPresent(t, held)
	want := []string{seg, oldLock, orphan} // by lock file name: held, old, orphan
	for i, rep := range reports {
		if got := sweptPaths(rep.Removed); !slices.Equal(got, want) {
			t.Errorf("sweep %d removed %v, want %v", i, got, want)
		}
		if got := sweptPaths(rep.Skipped); !slices.Equal(got, []string{held}) {
			t.Errorf("sweep %d skipped %v", i, got)
		}
	}
}

// Segments go only when asked, only when older than asked, and only when
// their lock is free; a young one is reported kept.
func TestSweepSegments(t *testing.T) {
	d := newSweepDir(t)
	oldSeg, oldLock := d.segment(t, "old", d.now.Add(-time.Hour)), d.lock(t, "old", d.now)
	youngSeg, youngLock := d.segment(t, "young", d.now), d.lock(t, "young", d.now)
	heldSeg, heldLock := d.segment(t, "held", d.now.Add(-time.Hour)), d.lock(t, "held", d.now)
	holder := shmtest.HoldLock(t, heldLock)
	defer holder.Release(t)

	rep, err := Sweep(SweepOptions{ListOptions: d.options()})
	if err != nil || len(rep.Removed)+len(rep.Skipped) != 0 {
		t.Fatalf("sweep without SegmentsOlderThan: %+v, %v", rep, err)
	}
	rep, err = Sweep(SweepOptions{ListOptions: d.options(), SegmentsOlderThan: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wantRemoved := []Swept{
		{"old", oldSeg, "segment", "older than 30m0s"},
		{"old", oldLock, "lock", "its segment was removed"},
	}
	wantSkipped := []Swept{
		{"held", heldSeg, "segment", "lock held"},
		{"young", youngSeg, "segment", "younger than 30m0s"},
	}
	if !slices.Equal(rep.Removed, wantRemoved) || !slices.Equal(rep.Skipped, wantSkipped) {
		t.Fatalf("report %+v\nwant removed %+v\nskipped %+v", rep, wantRemoved, wantSkipped)
	}
	shmtest.AssertAbsent(t, oldSeg, oldLock)
	shmtest.AssertPresent(t, youngSeg, youngLock, heldSeg, heldLock)
}

// The re-check under the lock catches what changed since the listing.
func TestSweepRechecks(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, d sweepDir, key string)
		reason string
	}{
		{"renewed", func(t *testing.T, d sweepDir, key string) {
			shmtest.SetMtime(t, d.dir+"/"+scope.LockName(key), d.now)
		}, "younger than 1m0s"},
		{"published", func(t *testing.T, d sweepDir, key string) {
			d.segment(t, key, d.now)
		}, "segment exists"},
		{"replaced", func(t *testing.T, d sweepDir, key string) {
			// A new file renamed over the old one (created first, so
			// that it cannot reuse the old inode number).
			fresh := shmtest.WriteFileAt(t, d.dir+"/fresh", nil, d.old)
			if err := os.Rename(fresh, d.dir+"/"+scope.LockName(key)); err != nil {
				t.Fatal(err)
			}
		}, "replaced while checking"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newSweepDir(t)
			path := d.lock(t, "k", d.old)
			o := SweepOptions{ListOptions: d.options().withDefaults()}
			locks, err := Locks(o.ListOptions)
			if err != nil || len(locks) != 1 || !locks[0].Orphan {
				t.Fatalf("locks %+v, %v", locks, err)
			}
			c.change(t, d, "k")
			var rep SweepReport
			if err := rep.skipOr(Swept{Path: path}, o.sweepOrphan(locks[0])); err != nil {
				t.Fatal(err)
			}
			if len(rep.Skipped) != 1 || rep.Skipped[0].Reason != c.reason {
				t.Fatalf("skipped %+v, want %q", rep.Skipped, c.reason)
			}
			shmtest.AssertPresent(t, path)
		})
	}
}
