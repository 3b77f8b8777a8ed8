//go:build linux

package ring

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"omnishm/internal/shmtest"
)

// bytesFrame is a PutMany frame of payload under key.
func bytesFrame(key string, payload []byte) Frame {
	return Frame{Key: key, Kind: KindBytes, Size: len(payload), Write: func(dst []byte) error { copy(dst, payload); return nil }}
}

// PutMany publishes its frames in order under one lock pair; each is then
// received as Put's would be, by key and by its handle.
func TestPutManyOneLockPair(t *testing.T) {
	_, p, r := pair(t, DefaultCapacity)
	mustPut(t, p, "0", "1", "warm", []byte("w")) // the ring exists: its creation locks too
	var frames []Frame
	for i := range 5 {
		frames = append(frames, bytesFrame(fmt.Sprintf("many%d", i), shmtest.CodeBytes(i)))
	}
	before := p.work().flocks
	if n := p.PutMany("0", "1", frames); n != len(frames) {
		t.Fatalf("tried %d of %d", n, len(frames))
	}
	if got := p.work().flocks - before; got != 2 {
		t.Fatalf("%d flock calls for %d frames, want one pair", got, len(frames))
	}
	for i, f := range frames {
		if !f.OK || f.Err != nil || f.Handle.Size != f.Size {
			t.Fatalf("frame %d: ok=%v err=%v handle %+v", i, f.OK, f.Err, f.Handle)
		}
		if i > 0 && f.Handle.Position <= frames[i-1].Handle.Position {
			t.Fatalf("frame %d at %d, after %d: not in order", i, f.Handle.Position, frames[i-1].Handle.Position)
		}
	}
	mustGet(t, r, "0", "1", "warm", nil)
	for i, f := range frames {
		var got []byte
		if i%2 == 0 { // by its handle, or by key
			got = mustGet(t, r, "0", "1", f.Key, &f.Handle)
		} else {
			got = mustGet(t, r, "0", "1", f.Key, nil)
		}
		if !bytes.Equal(got, shmtest.CodeBytes(i)) {
			t.Fatalf("%s: wrong value", f.Key)
		}
	}
}

// Each frame is refused or published as its own Put would be, in the one
// pass: a frame over a quarter of the ring and the frames a full ring has
// no room for are refused (no error) and the others still go; a write
// that fails, or a kind that is not a payload's, ends the pass there,
// publishing nothing of it or after it.
func TestPutManyFrameByFrame(t *testing.T) {
	boom := errors.New("boom")
	failing := Frame{Key: "bad", Kind: KindBytes, Size: 8, Write: func([]byte) error { return boom }}
	for _, tc := range []struct {
		name   string
		frames []Frame
		tried  int
		ok     []bool
		err    error
	}{
		{"over a quarter", []Frame{bytesFrame("a", []byte("1")), bytesFrame("big", make([]byte, 2000)), bytesFrame("c", []byte("3"))},
			3, []bool{true, false, true}, nil},
		// 4096 bytes of ring: four frames of 928 bytes fit, a fifth does
		// not, and a small one after it still does.
		{"full", []Frame{bytesFrame("f0", make([]byte, 900)), bytesFrame("f1", make([]byte, 900)), bytesFrame("f2", make([]byte, 900)),
			bytesFrame("f3", make([]byte, 900)), bytesFrame("f4", make([]byte, 900)), bytesFrame("f5", []byte("x"))},
			6, []bool{true, true, true, true, false, true}, nil},
		{"failed write", []Frame{bytesFrame("a", []byte("1")), failing, bytesFrame("c", []byte("3"))},
			2, []bool{true, false, false}, boom},
		{"bad kind", []Frame{bytesFrame("a", []byte("1")), {Key: "k", Kind: Kind(9), Size: 1, Write: failing.Write}, bytesFrame("c", []byte("3"))},
			2, []bool{true, false, false}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p, r := pair(t, 4096)
			if n := p.PutMany("0", "1", tc.frames); n != tc.tried {
				t.Fatalf("tried %d, want %d", n, tc.tried)
			}
			for i, f := range tc.frames {
				if f.OK != tc.ok[i] {
					t.Fatalf("frame %s: ok=%v, want %v", f.Key, f.OK, tc.ok[i])
				}
				_, got, err := getBytes(r, "0", "1", f.Key, nil)
				if err != nil || got != f.OK {
					t.Fatalf("frame %s (ok=%v): received %v, %v", f.Key, f.OK, got, err)
				}
			}
			last := tc.frames[tc.tried-1]
			switch {
			case tc.err != nil && !errors.Is(last.Err, tc.err):
				t.Fatalf("last tried: %v, want %v", last.Err, tc.err)
			case tc.name == "bad kind" && last.Err == nil:
				t.Fatal("a bad kind gave no error")
			case tc.tried == len(tc.frames) && last.Err != nil:
				t.Fatalf("last: %v", last.Err)
			}
		})
	}
}

// A frame of a key published before retires the earlier one, as Put does;
// an edge the ring does not serve refuses every frame; a closed Transport
// says so.
func TestPutManyReplacesRefusesAndCloses(t *testing.T) {
	_, p, r := pair(t, 4096)
	old := mustPut(t, p, "0", "1", "k", []byte("old"))
	frames := []Frame{bytesFrame("k", []byte("new"))}
	if p.PutMany("0", "1", frames) != 1 || !frames[0].OK {
		t.Fatalf("replacing frame: %+v", frames[0])
	}
	mustMiss(t, r, "0", "1", "k", &old)
	if got := mustGet(t, r, "0", "1", "k", nil); string(got) != "new" {
		t.Fatalf("got %q", got)
	}

	frames = []Frame{bytesFrame("x", []byte("1")), bytesFrame("y", []byte("2"))}
	if n := p.PutMany("a", "1", frames); n != 2 || frames[0].OK || frames[1].OK || frames[0].Err != nil || frames[1].Err != nil {
		t.Fatalf("non-numeric edge: tried %d, %+v", n, frames)
	}

	p.Close()
	frames = []Frame{bytesFrame("z", []byte("1"))}
	if n := p.PutMany("0", "1", frames); n != 1 || frames[0].OK || !errors.Is(frames[0].Err, ErrClosed) {
		t.Fatalf("closed: tried %d, %+v", n, frames[0])
	}
}
