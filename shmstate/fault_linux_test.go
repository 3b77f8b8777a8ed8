//go:build linux

package shmstate

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"omnishm/internal/shmtest"
	"omnishm/proc"
)

// Scan names each corrupt ring's fault, and never reports an unsigned
// underflow as the bytes used.
func TestScanNamesRingFaults(t *testing.T) {
	self, err := proc.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	good := func() []byte {
		return buildRing(4096, uint64(os.Getpid()), self, []frameSpec{{key: "a", payload: 5}, {key: "b", payload: 9}})
	}
	cases := []struct {
		name  string
		edit  func(b []byte) []byte
		fault string
	}{
		{"sound", func(b []byte) []byte { return b }, ""},
		{"bad magic", func(b []byte) []byte { copy(b, "NOTARING"); return b }, FaultBadMagic},
		{"header not written", func(b []byte) []byte { return make([]byte, len(b)) }, FaultNotWritten},
		{"empty file", func(b []byte) []byte { return nil }, FaultNotWritten},
		{"short file", func(b []byte) []byte { return b[:20] }, FaultNotRing},
		{"capacity mismatch", func(b []byte) []byte { le.PutUint64(b[8:], 8192); return b }, FaultCapacity},
		{"unaligned capacity", func(b []byte) []byte { return append(b, 1, 2, 3) }, FaultCapacity},
		{"tail after head", func(b []byte) []byte { le.PutUint64(b[24:], 4000); return b }, FaultPositions},
		{"frame size not a multiple of 16", func(b []byte) []byte { le.PutUint32(b[64:], 40); return b }, FaultFrame},
		{"frame past the capacity", func(b []byte) []byte { le.PutUint32(b[64:], 1<<20); return b }, FaultFrame},
		{"key past its frame", func(b []byte) []byte { le.PutUint16(b[64+10:], 60000); return b }, FaultFrame},
		{"frame past head", func(b []byte) []byte { le.PutUint64(b[16:], 40); return b }, FaultFrame},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			path := filepath.Join(f.dir, f.liveRing)
			shmtest.WriteFile(t, path, c.edit(good()))
			r, err := ScanRing(path, f.options())
			if err != nil {
				t.Fatal(err)
			}
			if r.Fault != c.fault {
				t.Errorf("fault %q (error %q), want %q", r.Fault, r.Error, c.fault)
			}
			if (r.Error == "") != (c.fault == "") {
				t.Errorf("error %q with fault %q", r.Error, r.Fault)
			}
			if r.Used > r.Capacity {
				t.Errorf("used %d in a capacity of %d", r.Used, r.Capacity)
			}
		})
	}
}

// A file the tools may not open is named so, not "header not written"; a
// marker whose ring is another user's file is not a marker without ring.
func TestScanNamesUnreadableRings(t *testing.T) {
	if got := faultOf(fmt.Errorf("ring: inspect x: %w", unix.EACCES)); got != "cannot open: permission denied" {
		t.Errorf("EACCES: %q", got)
	}
	f := newFixture(t)
	if !shmtest.Foreign(t, filepath.Join(f.dir, f.liveRing)) {
		t.Skip("needs root to make a file of another uid")
	}
	st, err := Scan(f.options())
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range st.Scopes {
		for _, m := range sc.MarkersWithoutRing {
			if m == f.liveRing {
				t.Errorf("%s reported as a marker without ring", m)
			}
		}
		for _, r := range sc.Rings {
			if r.Name == f.liveRing && r.Fault != FaultForeign {
				t.Errorf("foreign ring: fault %q, error %q", r.Fault, r.Error)
			}
		}
	}
}
