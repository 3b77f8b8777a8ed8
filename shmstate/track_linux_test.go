package shmstate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ScanRing reads one ring as Scan does, marker included.
func TestScanRing(t *testing.T) {
	f := newFixture(t)
	st, err := Scan(f.options())
	if err != nil {
		t.Fatal(err)
	}
	var fromScan Ring
	for _, r := range st.Scopes[0].Rings {
		if r.Name == f.liveRing {
			fromScan = r
		}
	}
	if fromScan.Head != 32+80+32 || fromScan.Tail != 0 {
		t.Fatalf("head %d tail %d", fromScan.Head, fromScan.Tail)
	}
	r, err := ScanRing(filepath.Join(f.dir, f.liveRing), f.options())
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != fromScan.Name || r.Used != fromScan.Used || r.Ready != fromScan.Ready || r.Done != fromScan.Done ||
		r.Head != fromScan.Head || r.Marker != fromScan.Marker || !r.Marker || r.Producer != Alive {
		t.Fatalf("ScanRing %+v\nScan     %+v", r, fromScan)
	}
	if _, err := ScanRing(filepath.Join(f.dir, f.names.EdgePrefix("0", "1")+"99_ff"), f.options()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing ring: %v", err)
	}
	if _, err := ScanRing(filepath.Join(f.dir, "seg"), f.options()); err == nil {
		t.Fatal("a segment read as a ring")
	}
}

// The fixture's orphan candidates: the dead producer's ring, the marker
// without a ring, the orphan lock file and the FIFO nobody reads.
func TestOrphans(t *testing.T) {
	f := newFixture(t)
	st, err := Scan(f.options())
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(f.dir, f.deadRing))
	if err != nil {
		t.Fatal(err)
	}
	want := Orphans{Rings: 1, RingBytes: info.Size(), Markers: 1, Locks: 1, FIFOs: 1}
	if got := st.Orphans(); got != want {
		t.Fatalf("orphans %+v, want %+v", got, want)
	}
}

// A Tracker's second scan of the fixture sees no activity and ages the
// ready frames by the time between the scans.
func TestTrackerScan(t *testing.T) {
	f := newFixture(t)
	var tr Tracker
	if _, err := tr.Scan(Options{Dir: f.dir, Now: f.now}); err != nil {
		t.Fatal(err)
	}
	st, err := tr.Scan(Options{Dir: f.dir, Now: f.now.Add(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Scopes[0].Rings {
		if r.Activity == nil || *r.Activity != (Activity{Interval: Age(3 * time.Second)}) || time.Duration(r.OldestReady) != 3*time.Second {
			t.Errorf("%s: activity %+v, oldest ready %v", r.Name, r.Activity, r.OldestReady)
		}
	}
}
