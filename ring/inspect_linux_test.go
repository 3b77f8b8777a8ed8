package ring

import (
	"bytes"
	"errors"
	"fmt"
	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/proc"
	"omnishm/scope"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Tests of the ring file a Go producer writes, read from outside.

func TestGoProducerPythonLayout(t *testing.T) {
	// The file a Go producer writes parses as the Python layout: header,
	// 16-byte aligned frames, padding at the wrap, state byte at 9.
	_, p, r := pair(t, 4096)
	var d descriptor.RingHandle
	for i := range 9 {
		d = mustPut(t, p, "0", "1", fmt.Sprintf("req%d_0_%d", i, i), shmtest.CodeBytes(i))
		if i < 7 {
			mustGet(t, r, "0", "1", fmt.Sprintf("req%d_0_%d", i, i), nil)
		}
	}
	file, h, frames := ringFile(t, d)
	self, err := proc.Self()
	if err != nil {
		t.Fatal(err)
	}
	if string(file[:8]) != "OMSHMR01" || h.Capacity != 4096 || h.Creator() != self {
		t.Fatalf("header %+v", h)
	}
	if !bytes.Equal(file[48:64], make([]byte, 16)) {
		t.Fatal("header bytes 48..63 not zero")
	}
	ready := 0
	for _, f := range frames {
		if f.Kind == KindBytes && !f.Done {
			ready++
			want := 16 + len(f.Key) + f.PayloadLen
			if f.Total != (want+15)&^15 {
				t.Fatalf("frame %+v", f)
			}
		}
	}
	if ready != 2 || frames[len(frames)-1].Position != d.Position {
		t.Fatalf("frames %+v", frames)
	}
	info, err := Inspect(scope.ShmDir + "/" + d.Name)
	if err != nil || info.Busy || info.Producer != proc.Alive || info.Header != h || len(info.Frames) != len(frames) {
		t.Fatalf("Inspect: %+v %v", info, err)
	}
}

// Inspect tells a ring being made from a corrupt one, reports a held lock
// as Busy without waiting (the identity still read), and judges the
// creator without calling Unknown dead; InspectHeader does not lock.
func TestInspectStates(t *testing.T) {
	sc := shmtest.Scope(t)
	names := scope.New(sc)
	path := func(tag string) string {
		return scope.ShmDir + "/" + names.EdgePrefix("0", "1") + "1_" + strings.Repeat(tag, 16)
	}
	unwritten, corrupt, dead := path("a1"), path("b2"), path("c3")
	file, _ := loadRingVector(t)
	for p, b := range map[string][]byte{unwritten: make([]byte, HeaderSize+4096), corrupt: []byte("not a ring at all, no no no no no no no no no no no no no no no no"), dead: file} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	if _, err := Inspect(unwritten); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("unwritten: %v, want ErrNotInitialized", err)
	}
	if _, err := Inspect(corrupt); !errors.Is(err, ErrCorrupt) {
		t.Errorf("corrupt: %v, want ErrCorrupt", err)
	}
	info, err := Inspect(dead)
	if err != nil || info.Producer != proc.Dead || len(info.Frames) == 0 {
		t.Errorf("dead producer's ring: %+v, %v", info, err)
	}

	_, p, _ := pair(t, 4096)
	d := mustPut(t, p, "0", "1", "held", []byte{1})
	holder := shmtest.HoldLock(t, scope.ShmDir+"/"+d.Name)
	withoutWaiting(t, "Inspect", func() error {
		info, err := Inspect(scope.ShmDir + "/" + d.Name)
		if err == nil && (!info.Busy || info.Frames != nil || info.Header.Capacity != 4096 || info.Producer != proc.Alive) {
			err = fmt.Errorf("held ring: %+v", info)
		}
		return err
	})
	holder.Release(t)

	// InspectHeader takes no lock: a receiver's non-blocking lock, held
	// meanwhile, never meets it (the test holds it exclusively here).
	holder = shmtest.HoldLock(t, scope.ShmDir+"/"+d.Name)
	withoutWaiting(t, "InspectHeader", func() error {
		info, err := InspectHeader(scope.ShmDir + "/" + d.Name)
		if err == nil && (info.Busy || info.Frames != nil || info.Header.Capacity != 4096 || info.Producer != proc.Alive) {
			err = fmt.Errorf("header of a held ring: %+v", info)
		}
		return err
	})
	holder.Release(t)
	if _, err := InspectHeader(corrupt); !errors.Is(err, ErrCorrupt) {
		t.Errorf("InspectHeader of a corrupt file: %v, want ErrCorrupt", err)
	}
}

// BenchmarkInspect reads a 64 MiB ring holding one small frame, as
// `omnishm inspect` and the metrics exporter do: the ring lock is held for
// the copy of what is in use, not of the whole buffer.
func BenchmarkInspect(b *testing.B) {
	_, p, _ := pair(b, MaxCapacity)
	d := mustPut(b, p, "0", "1", "inspected", shmtest.CodeBytes(1))
	path := scope.ShmDir + "/" + d.Name
	for b.Loop() {
		if info, err := Inspect(path); err != nil || len(info.Frames) != 1 {
			b.Fatal(info, err)
		}
	}
}

// ringFile reads the ring file d names and parses it, failing the test if
// it does not parse.
func ringFile(t testing.TB, d descriptor.RingHandle) ([]byte, Header, []FrameInfo) {
	t.Helper()
	file, err := os.ReadFile(scope.ShmDir + "/" + d.Name)
	if err != nil {
		t.Fatal(err)
	}
	h, frames, err := Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	return file, h, frames
}

// FuzzInspect plants arbitrary bytes as a file and inspects it as a tool
// does: no panic, and reading only the header and the used bytes (readUsed)
// gives what Parse gives of the whole file.
func FuzzInspect(f *testing.F) {
	seedRingFiles(f)
	f.Add([]byte{})
	path := filepath.Join(f.TempDir(), "ring")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		info, err := Inspect(path)
		if info.Busy {
			t.Fatal("busy: nobody holds the lock")
		}
		h, frames, perr := Parse(b)
		if _, herr := ReadHeader(b[:min(len(b), HeaderSize)]); herr != nil {
			if err == nil || errors.Is(herr, ErrNotInitialized) != errors.Is(err, ErrNotInitialized) {
				t.Fatalf("header refused (%v), Inspect: %v", herr, err)
			}
			return
		}
		if (err == nil) != (perr == nil) || err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Inspect: %v, Parse: %v", err, perr)
		}
		if err == nil && (info.Header != h || !slices.Equal(info.Frames, frames)) {
			t.Fatalf("Inspect read %+v %+v, Parse %+v %+v", info.Header, info.Frames, h, frames)
		}
	})
}
