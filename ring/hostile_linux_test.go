package ring

import (
	"encoding/binary"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// corruptions are what a live producer's ring may be made to hold: each
// writes into the ring file f of a ring whose first frame is at data
// offset 0 (file offset HeaderSize).
var corruptions = []struct {
	name  string
	write func(t *testing.T, f *os.File)
}{
	{"bad magic", func(t *testing.T, f *os.File) { writeAt(t, f, 0, []byte("NOTARING")) }},
	{"header not written", func(t *testing.T, f *os.File) { writeAt(t, f, 0, make([]byte, 8)) }},
	{"capacity mismatch", func(t *testing.T, f *os.File) { writeU64(t, f, offCapacity, 1<<20) }},
	{"tail after head", func(t *testing.T, f *os.File) { writeU64(t, f, offTail, 1<<12) }},
	{"frame size not a multiple of 16", func(t *testing.T, f *os.File) { writeU32(t, f, HeaderSize, 40) }},
	{"frame past the capacity", func(t *testing.T, f *os.File) { writeU32(t, f, HeaderSize, 1<<30) }},
	{"key past its frame", func(t *testing.T, f *os.File) { writeAt(t, f, HeaderSize+10, []byte{0xff, 0xff}) }},
}

func writeAt(t *testing.T, f *os.File, off int64, b []byte) {
	t.Helper()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func writeU64(t *testing.T, f *os.File, off int64, v uint64) {
	writeAt(t, f, off, binary.LittleEndian.AppendUint64(nil, v))
}

func writeU32(t *testing.T, f *os.File, off int64, v uint32) {
	writeAt(t, f, off, binary.LittleEndian.AppendUint32(nil, v))
}

// ringOf is the one ring tr produces on edge from->to.
func ringOf(t testing.TB, tr *Transport, from, to string) string {
	t.Helper()
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	p := tr.producers[edgeKey{from, to}]
	if p == nil {
		t.Fatalf("no ring on %s->%s", from, to)
	}
	return p.name
}

// A ring that fails validation while its creator lives is dropped,
// reported once, not attached again while it stays as it is, and never
// stops the edge's other ring from delivering, by Get, by descriptor or by
// Sweep; Get of a key no ring holds is a miss, never an error.
func TestCorruptRingContained(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			sc := shmtest.Scope(t)
			legit, hostile := newTransport(t, sc, 1<<12), newTransport(t, sc, 1<<12)
			var reports atomic.Int32
			receiver, err := New(Options{Names: scope.New(sc), Capacity: 1 << 12, OnCorrupt: func(name string, err error) {
				reports.Add(1)
				t.Logf("rejected %s: %v", name, err)
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { receiver.Close() })
			bad := mustPut(t, hostile, "0", "1", "planted", []byte("never delivered"))
			mustPut(t, legit, "0", "1", "first", []byte("v0"))
			f, err := os.OpenFile(scope.Path(ringOf(t, hostile, "0", "1")), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			c.write(t, f)
			f.Close()
			if got := mustGet(t, receiver, "0", "1", "first", nil); string(got) != "v0" {
				t.Fatalf("first: %q", got)
			}
			mustMiss(t, receiver, "0", "1", "absent", nil)
			mustMiss(t, receiver, "0", "1", "planted", &bad)
			attaches := receiver.attaches()
			for i := range 20 {
				key, want := "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)
				mustPut(t, legit, "0", "1", key, []byte(want))
				if got := mustGet(t, receiver, "0", "1", key, nil); string(got) != want {
					t.Fatalf("%s: %q", key, got)
				}
				mustMiss(t, receiver, "0", "1", "planted", nil)
				mustMiss(t, receiver, "0", "1", "planted", &bad)
				mustMiss(t, receiver, "0", "1", "absent", nil)
				d2 := mustPut(t, legit, "0", "1", key+"d", []byte(want))
				if got := mustGet(t, receiver, "0", "1", key+"d", &d2); string(got) != want {
					t.Fatalf("%s by descriptor: %q", key, got)
				}
				s := newSweeper(key + "s")
				mustPut(t, legit, "0", "1", key+"s", []byte(want))
				s.sweep(t, receiver, key+"s")
				if string(s.got[key+"s"]) != want {
					t.Fatalf("%s by sweep: %q", key, s.got[key+"s"])
				}
			}
			if n := receiver.attaches(); n != attaches {
				t.Errorf("%d attaches after the ring was rejected, want none", n-attaches)
			}
			if n := reports.Load(); n != 1 {
				t.Errorf("%d reports, want one", n)
			}
		})
	}
}
