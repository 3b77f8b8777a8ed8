package ring

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"omnishm/descriptor"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

const vectors = "../testdata/vectors"

// memRing is a ring in plain memory driven by the pure core, as the
// producer drives a mapped one: used to test layout without /dev/shm.
type memRing struct {
	file []byte
	ix   index
}

func newMemRing(capacity int) *memRing {
	r := &memRing{file: make([]byte, HeaderSize+capacity)}
	encodeHeader(r.file, Header{Capacity: uint64(capacity), CreatorPID: 1, CreatorStart: 2})
	return r
}

func (r *memRing) data() []byte { return r.file[HeaderSize:] }
func (r *memRing) head() uint64 { return binary.LittleEndian.Uint64(r.file[offHead:]) }
func (r *memRing) tail() uint64 { return binary.LittleEndian.Uint64(r.file[offTail:]) }

// put follows SPEC §3 put; it returns the frame position or ok=false.
func (r *memRing) put(key string, payload []byte) (uint64, bool) {
	data, capacity := r.data(), uint64(len(r.data()))
	head := r.head()
	tail, err := reclaim(data, head, r.tail())
	if err != nil {
		panic(err)
	}
	binary.LittleEndian.PutUint64(r.file[offTail:], tail)
	total := frameTotal(len(key), len(payload))
	padding, ok := place(capacity, head, tail, total)
	if !ok {
		return 0, false
	}
	if padding > 0 {
		writeFrame(data, head, frame{total: uint32(padding), kind: kindPadding, state: stateDone})
		head += padding
	}
	off := head % capacity
	copy(data[off+frameHeaderSize:], key)
	copy(data[off+frameHeaderSize+uint64(len(key)):], payload)
	writeFrame(data, head, frame{total: uint32(total), payloadLen: uint32(len(payload)), keyLen: uint16(len(key))})
	binary.LittleEndian.PutUint64(r.file[offHead:], head+total)
	return head, true
}

// indexed is every current entry of ix.
func indexed(ix *index) map[string]uint64 {
	m := map[string]uint64{}
	ix.each(func(k string, pos uint64) bool { m[k] = pos; return true })
	return m
}

// take follows SPEC §3 get on the reader's index.
func (r *memRing) take(key string) ([]byte, bool) {
	if err := r.ix.scan(r.data(), r.head(), r.tail()); err != nil {
		panic(err)
	}
	pos, ok := r.ix.lookup(key)
	if !ok {
		return nil, false
	}
	r.ix.forget(key)
	f, err := readFrame(r.data(), pos)
	if err != nil || f.state != stateReady {
		return nil, false
	}
	out := bytes.Clone(framePayload(r.data(), pos, f))
	markDone(r.data(), pos)
	return out, true
}

func TestAlign16(t *testing.T) {
	for _, c := range []struct{ in, want uint64 }{{0, 0}, {1, 16}, {15, 16}, {16, 16}, {17, 32}, {4095, 4096}} {
		if got := align16(c.in); got != c.want {
			t.Errorf("align16(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestOffsetIn(t *testing.T) {
	for _, c := range []struct{ pos, capacity uint64 }{
		{0, 4096}, {4095, 4096}, {4096, 4096}, {1<<64 - 16, 4 << 20},
		{0, 4112}, {4112, 4112}, {1<<64 - 16, 4112}, {12345 * 16, 48 << 10},
	} {
		if got, want := offsetIn(c.pos, c.capacity), c.pos%c.capacity; got != want {
			t.Errorf("offsetIn(%d, %d) = %d, want %d", c.pos, c.capacity, got, want)
		}
	}
}

func TestPlace(t *testing.T) {
	for _, c := range []struct {
		name                 string
		capacity, head, tail uint64
		total, padding       uint64
		ok                   bool
	}{
		{"empty", 4096, 0, 0, 1024, 0, true},
		{"exact end", 4096, 3072, 3072, 1024, 0, true},
		{"wrap pads", 4096, 3584, 3584, 1024, 512, true},
		{"wrap after laps", 4096, 4096*5 + 3584, 4096*5 + 3584, 1024, 512, true},
		{"full", 4096, 4096, 0, 16, 0, false},
		{"padding does not fit", 4096, 3584, 1008, 1024, 0, false},
		{"exactly fills", 4096, 3072, 0, 1024, 0, true},
	} {
		padding, ok := place(c.capacity, c.head, c.tail, c.total)
		if padding != c.padding || ok != c.ok {
			t.Errorf("%s: place = (%d, %v), want (%d, %v)", c.name, padding, ok, c.padding, c.ok)
		}
	}
}

func TestReadFrameRejects(t *testing.T) {
	data := make([]byte, 256)
	for _, c := range []struct {
		name string
		pos  uint64
		f    frame
	}{
		{"too small", 0, frame{total: 0}},
		{"not aligned", 0, frame{total: 40}},
		{"crosses end", 224, frame{total: 48}},
		{"payload past total", 0, frame{total: 32, payloadLen: 10, keyLen: 7}},
	} {
		clear(data)
		writeFrame(data, c.pos, c.f)
		if _, err := readFrame(data, c.pos); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", c.name, err)
		}
	}
	// padding needs no key/payload bounds
	writeFrame(data, 0, frame{total: 32, payloadLen: 1000, kind: kindPadding, state: stateDone})
	if _, err := readFrame(data, 0); err != nil {
		t.Errorf("padding: %v", err)
	}
}

func TestMemRingWrapsAndRecovers(t *testing.T) {
	r := newMemRing(4096)
	var last uint64
	for i := range 300 {
		key := fmt.Sprintf("wrap%d", i)
		payload := bytes.Repeat([]byte{byte(i)}, 100+i%300)
		pos, ok := r.put(key, payload)
		if !ok {
			t.Fatalf("put %d refused with nothing pending", i)
		}
		if i > 0 && pos <= last {
			t.Fatalf("position %d not after %d", pos, last)
		}
		last = pos
		got, ok := r.take(key)
		if !ok || !bytes.Equal(got, payload) {
			t.Fatalf("take %d: ok=%v, %d bytes", i, ok, len(got))
		}
	}
	if r.head() < 4*4096 {
		t.Fatalf("did not wrap: head %d", r.head())
	}
	// fill until refused, then consume and recover
	n := 0
	for ; ; n++ {
		if _, ok := r.put(fmt.Sprintf("full%d", n), make([]byte, 900)); !ok {
			break
		}
	}
	if n < 3 || n > 4 {
		t.Fatalf("%d frames of 928 bytes fit in 4096", n)
	}
	for i := range n {
		if _, ok := r.take(fmt.Sprintf("full%d", i)); !ok {
			t.Fatalf("full%d lost", i)
		}
	}
	if _, ok := r.put("recovered", make([]byte, 900)); !ok {
		t.Fatal("ring did not recover after frames were consumed")
	}
}

type ringVector struct {
	Capacity uint64   `json:"capacity"`
	Head     uint64   `json:"head"`
	Tail     uint64   `json:"tail"`
	Consumed []string `json:"consumed"`
	Ready    map[string]struct {
		Case     string `json:"case"`
		Position uint64 `json:"position"`
		Size     int    `json:"size"`
	} `json:"ready"`
}

func loadRingVector(t testing.TB) ([]byte, ringVector) {
	t.Helper()
	file, err := os.ReadFile(filepath.Join(vectors, "ring-4096.bin"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(vectors, "ring-4096.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v ringVector
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return file, v
}

func TestParsePythonRing(t *testing.T) {
	file, want := loadRingVector(t)
	h, frames, err := Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	if h.Capacity != want.Capacity || h.Head != want.Head || h.Tail != want.Tail {
		t.Fatalf("header %+v, want capacity %d head %d tail %d", h, want.Capacity, want.Head, want.Tail)
	}
	ready := map[string]FrameInfo{}
	padding := 0
	for _, f := range frames {
		switch {
		case f.Kind == kindPadding:
			padding++
			if !f.Done || (f.Position+uint64(f.Total))%h.Capacity != 0 {
				t.Errorf("padding frame %+v does not fill to the end", f)
			}
		case !f.Done:
			ready[f.Key] = f
		}
	}
	if padding != 1 {
		t.Errorf("%d padding frames, want 1", padding)
	}
	if len(ready) != len(want.Ready) {
		t.Errorf("%d ready frames, want %d", len(ready), len(want.Ready))
	}
	for key, w := range want.Ready {
		f, ok := ready[key]
		if !ok {
			t.Errorf("%s missing", key)
			continue
		}
		if f.Position != w.Position || f.PayloadLen != w.Size {
			t.Errorf("%s at %d size %d, want %d size %d", key, f.Position, f.PayloadLen, w.Position, w.Size)
		}
		payload := framePayload(file[HeaderSize:], f.Position, frame{keyLen: uint16(len(f.Key)), payloadLen: uint32(f.PayloadLen)})
		// Kind-0 payloads are the case's msgpack bytes; tensor frames carry a
		// random nonce, so only their length matches the reference frame.
		if f.Kind == KindBytes {
			mp, err := os.ReadFile(filepath.Join(vectors, w.Case+".msgpack"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(payload, mp) {
				t.Errorf("%s payload %x, want %x", key, payload, mp)
			}
		} else {
			ref, err := os.ReadFile(filepath.Join(vectors, w.Case+".frame"))
			if err != nil {
				t.Fatal(err)
			}
			if f.Kind != KindTensors || len(ref) != len(payload) {
				t.Errorf("%s: kind %v, %d bytes; want tensors, %d", key, f.Kind, len(payload), len(ref))
			}
		}
	}
	// a reader's scan indexes exactly the ready keys
	var ix index
	if err := ix.scan(file[HeaderSize:], h.Head, h.Tail); err != nil {
		t.Fatal(err)
	}
	if got := indexed(&ix); len(got) != len(want.Ready) {
		t.Errorf("scan indexed %v", got)
	}
	for _, k := range want.Consumed {
		if _, ok := ix.lookup(k); ok {
			t.Errorf("consumed %s indexed", k)
		}
	}
}

func TestParseRejectsCorruptHeaders(t *testing.T) {
	file, _ := loadRingVector(t)
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:63] }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"capacity", func(b []byte) []byte { return b[:len(b)-16] }},
		{"tail after head", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[offTail:], 1<<40); return b }},
		{"used > capacity", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[offTail:], 0); return b }},
		{"bad frame", func(b []byte) []byte { b[HeaderSize+15360%4096] = 3; return b }},
	} {
		_, _, err := Parse(c.edit(bytes.Clone(file)))
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", c.name, err)
		}
	}
}

// seedRingFiles seeds a fuzz target of whole ring files: the Python-made
// vector, an empty Go ring and a bare magic.
func seedRingFiles(f *testing.F) {
	file, _ := loadRingVector(f)
	f.Add(file)
	f.Add(newMemRing(64).file)
	f.Add([]byte("OMSHMR01"))
}

func FuzzParse(f *testing.F) {
	seedRingFiles(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, frames, err := Parse(b)
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotInitialized) {
			t.Fatalf("error %v wraps neither ErrCorrupt nor ErrNotInitialized", err)
		}
		if rh, err := ReadHeader(b); err == nil && (len(b) < HeaderSize || rh.Capacity != binary.LittleEndian.Uint64(b[offCapacity:])) {
			t.Fatalf("ReadHeader(%d bytes) = %+v", len(b), rh)
		}
		for _, fr := range frames {
			if fr.Position < h.Tail || fr.Position >= h.Head || fr.Total < 16 || fr.Total%16 != 0 {
				t.Fatalf("frame %+v outside [%d, %d)", fr, h.Tail, h.Head)
			}
		}
	})
}

// FuzzScanTake drives a reader's scan and take over arbitrary ring bytes,
// with a head and tail the fuzzer picks: no panic, no read outside.
func FuzzScanTake(f *testing.F) {
	file, err := os.ReadFile(filepath.Join(vectors, "ring-4096.bin"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(file[HeaderSize:], uint64(17136), uint64(15360), "req55_0_55")
	f.Add(make([]byte, 64), uint64(32), uint64(0), "")
	// The ring bytes sit at the end of a shared mapping followed by a
	// PROT_NONE guard page: a read past the buffer would fault.
	const region = 1 << 20
	mem, err := unix.Mmap(-1, 0, region+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		f.Fatal(err)
	}
	if err := unix.Mprotect(mem[region:], unix.PROT_NONE); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, input []byte, head, tail uint64, key string) {
		if len(input) < 16 || len(input) > region {
			return
		}
		n := len(input) &^ 15
		data := mem[region-n : region : region]
		copy(data, input)
		var ix index
		for range 2 {
			if err := ix.scan(data, head, tail); err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatal(err)
				}
				return
			}
			for k, pos := range indexed(&ix) {
				fr, err := readFrame(data, pos)
				if err != nil {
					t.Fatalf("indexed frame %q at %d: %v", k, pos, err)
				}
				_ = framePayload(data, pos, fr)
				if string(frameKey(data, pos, fr)) != k {
					t.Fatalf("key mismatch at %d", pos)
				}
			}
			if pos, ok := ix.lookup(key); ok {
				markDone(data, pos)
				ix.forget(key)
			}
			if nt, err := reclaim(data, head, tail); err == nil {
				tail = nt
			}
		}
	})
}

func TestParseNearPositionOverflow(t *testing.T) {
	r := newMemRing(64)
	// A tail just below 2^64: pos + total wraps; must not loop.
	binary.LittleEndian.PutUint64(r.file[offTail:], 1<<64-32)
	binary.LittleEndian.PutUint64(r.file[offHead:], 1<<64-16)
	writeFrame(r.data(), 1<<64-32, frame{total: 32, kind: kindPadding, state: stateDone})
	if _, _, err := Parse(r.file); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err %v", err)
	}
	var ix index
	if err := ix.scan(r.data(), 1<<64-16, 1<<64-32); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("scan err %v", err)
	}
	if _, err := reclaim(r.data(), 1<<64-16, 1<<64-32); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reclaim err %v", err)
	}
	if _, err := reclaim(r.data(), 1<<60, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reclaim of an impossible range: %v", err)
	}
}

func TestReadHeader(t *testing.T) {
	good := make([]byte, HeaderSize+4096)
	encodeHeader(good, Header{Capacity: 4096, Head: 32, Tail: 16, CreatorPID: 77, CreatorStart: 99})
	h, err := ReadHeader(good[:HeaderSize])
	if err != nil || h != (Header{Capacity: 4096, Head: 32, Tail: 16, CreatorPID: 77, CreatorStart: 99}) {
		t.Fatalf("ReadHeader = %+v, %v", h, err)
	}
	if id := h.Creator(); id.PID != 77 || id.Start != 99 {
		t.Fatalf("Creator = %v", id)
	}
	if id := (Header{CreatorPID: 1 << 40}).Creator(); id.PID <= 1<<31-1 {
		t.Fatalf("a pid beyond int32 became %v", id)
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty file", nil, ErrNotInitialized},
		{"sized, not written", make([]byte, HeaderSize), ErrNotInitialized},
		{"short zeros", make([]byte, 5), ErrNotInitialized},
		{"short", good[:63], ErrCorrupt},
		{"bad magic", append([]byte("OMSHMR02"), good[8:HeaderSize]...), ErrCorrupt},
	}
	for _, c := range cases {
		if _, err := ReadHeader(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
}

// claimed decides from a tail and a frame header read without the lock.
func TestClaimedDecision(t *testing.T) {
	r := newMemRing(4096)
	pos, _ := r.put("k", []byte{1, 2, 3})
	h, err := ReadHeader(r.file)
	if err != nil {
		t.Fatal(err)
	}
	fh := func() []byte { return r.data()[pos : pos+frameHeaderSize] }
	if c, err := claimed(h, h.Tail, pos, 3, fh()); c || err != nil {
		t.Fatalf("ready frame: %v %v", c, err)
	}
	if c, err := claimed(h, pos+1, pos, 3, nil); !c || err != nil {
		t.Fatalf("tail past it: %v %v", c, err)
	}
	if _, err := claimed(h, h.Tail, pos, 4, fh()); !errors.Is(err, descriptor.ErrBad) {
		t.Errorf("wrong size: %v", err)
	}
	if _, err := claimed(h, h.Tail, h.Head, 3, fh()); !errors.Is(err, descriptor.ErrBad) {
		t.Errorf("at head: %v", err)
	}
	markDone(r.data(), pos)
	if c, err := claimed(h, h.Tail, pos, 3, fh()); !c || err != nil {
		t.Fatalf("done frame: %v %v", c, err)
	}
}

// FuzzClaimed feeds the claim decision a header and a frame header as an
// unlocked read may find them: any bytes, never a panic.
func FuzzClaimed(f *testing.F) {
	r := newMemRing(4096)
	pos, _ := r.put("k", []byte{1, 2, 3})
	f.Add(r.file[:HeaderSize], r.data()[pos:pos+frameHeaderSize], pos, 3)
	f.Add(make([]byte, HeaderSize), []byte{}, uint64(0), 0)
	f.Fuzz(func(t *testing.T, hdr, fh []byte, pos uint64, size int) {
		h, err := ReadHeader(hdr)
		if err != nil {
			return
		}
		done, err := claimed(h, h.Tail, pos, size, fh)
		if err == nil && !done && (pos < h.Tail || pos >= h.Head) {
			t.Fatalf("position %d outside [%d, %d) waiting", pos, h.Tail, h.Head)
		}
	})
}

func TestIndexSince(t *testing.T) {
	var ix index
	for i, k := range []string{"a", "b", "c", "d"} {
		ix.add(k, uint64(16*i))
	}
	ix.prune(16) // drops a
	for _, c := range []struct {
		pos  uint64
		want []string
	}{{0, []string{"b", "c", "d"}}, {16, []string{"b", "c", "d"}}, {17, []string{"c", "d"}}, {48, []string{"d"}}, {49, nil}} {
		var got []string
		for _, e := range ix.since(c.pos) {
			got = append(got, e.key)
		}
		if !slices.Equal(got, c.want) || ix.indexedSince(c.pos) != (len(c.want) > 0) {
			t.Errorf("since(%d) = %q (indexedSince %v), want %q", c.pos, got, ix.indexedSince(c.pos), c.want)
		}
	}
}

// scanFor returns the newest ready frame of the wanted key without
// indexing it, and indexes every other ready frame as scan does.
func TestScanForLeavesTheWantedKeyOut(t *testing.T) {
	for _, c := range []struct {
		name    string
		put     []string // in order; a key put twice has two ready frames
		want    string
		found   bool
		at      int      // index into put of the frame returned
		indexed []string // sorted
	}{
		{"only the wanted", []string{"k"}, "k", true, 0, nil},
		{"among others", []string{"a", "k", "b"}, "k", true, 1, []string{"a", "b"}},
		{"the newest of two", []string{"k", "a", "k"}, "k", true, 2, []string{"a"}},
		{"absent", []string{"a", "b"}, "k", false, 0, []string{"a", "b"}},
		{"none wanted", []string{"a", "k"}, "", false, 0, []string{"a", "k"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newMemRing(4096)
			var positions []uint64
			for _, k := range c.put {
				pos, ok := r.put(k, []byte("payload"))
				if !ok {
					t.Fatal("put refused")
				}
				positions = append(positions, pos)
			}
			pos, f, found, err := r.ix.scanFor(r.data(), r.head(), r.tail(), c.want)
			if err != nil || found != c.found || found && (pos != positions[c.at] || f.state != stateReady || int(f.keyLen) != len(c.want)) {
				t.Fatalf("scanFor = %d, %+v, %v, %v; want %v at %d", pos, f, found, err, c.found, positions[c.at])
			}
			got := slices.Sorted(maps.Keys(indexed(&r.ix)))
			if !slices.Equal(got, c.indexed) {
				t.Errorf("indexed %q, want %q", got, c.indexed)
			}
			if r.ix.cursor != r.head() || r.ix.frames != uint64(len(c.put)) {
				t.Errorf("cursor %d frames %d, want %d and %d", r.ix.cursor, r.ix.frames, r.head(), len(c.put))
			}
		})
	}
}

// TestIndexAgreesWithAMap drives an index through adds, forgets and prunes
// that take it past smallIndex entries and back (compared entries, then a
// map, then compared again once it empties) and checks every answer against
// a plain map of the current entries.
func TestIndexAgreesWithAMap(t *testing.T) {
	for _, live := range []int{1, 3, smallIndex, smallIndex + 1, 3 * smallIndex} {
		t.Run(fmt.Sprint(live), func(t *testing.T) {
			var ix index
			want := map[string]uint64{}
			var order []keyAt // every add, as positions holds them
			pos, tail := uint64(0), uint64(0)
			mapped := false
			for step := range 40 * smallIndex {
				key := fmt.Sprintf("k%d", (step*7)%(2*live+1))
				switch {
				case step%5 == 3:
					ix.forget(key)
					delete(want, key)
				default:
					pos += 16
					ix.add(key, pos)
					want[key] = pos
					order = append(order, keyAt{pos: pos, key: key})
				}
				// Keep about live entries; empty it now and then.
				if n := len(order); n > live || step%(11*smallIndex) == 0 {
					cut := n - live
					if step%(11*smallIndex) == 0 {
						cut = n
					}
					tail = order[max(cut-1, 0)].pos + 1
					for _, e := range order[:cut] {
						if want[e.key] == e.pos {
							delete(want, e.key)
						}
					}
					order = order[cut:]
					ix.prune(tail)
				}
				mapped = mapped || ix.mapped
				if got := indexed(&ix); !maps.Equal(got, want) {
					t.Fatalf("step %d: indexed %v, want %v", step, got, want)
				}
				for k, p := range want {
					if got, ok := ix.lookup(k); !ok || got != p {
						t.Fatalf("step %d: lookup(%s) = %d, %v; want %d", step, k, got, ok, p)
					}
				}
				if _, ok := ix.lookup("absent"); ok || ix.empty() != (len(want) == 0) {
					t.Fatalf("step %d: absent found %v, empty %v with %d", step, ok, ix.empty(), len(want))
				}
			}
			if mapped != (live >= smallIndex) {
				t.Errorf("mapped %v with %d entries live", mapped, live)
			}
		})
	}
}
