package frame_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"omnishm/frame"
	"omnishm/internal/race"
	"omnishm/internal/vectortest"
	"omnishm/tensor"
	"omnishm/wire"
)

// encode prepares and writes v, as a producer would into ring memory.
func encode(t testing.TB, v any, limit int) (*frame.Prepared, []byte) {
	t.Helper()
	p, err := frame.Prepare(v, limit)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, p.Size())
	for i := range buf {
		buf[i] = 0xee // Write must overwrite every byte, padding included
	}
	if err := p.Write(buf); err != nil {
		t.Fatal(err)
	}
	return p, buf
}

// mustDecode decodes a frame, failing the test on an error.
func mustDecode(t testing.TB, b []byte) any {
	t.Helper()
	v, err := frame.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// nonceOf returns the nonce of a frame: the last 16 bytes of its header.
func nonceOf(t testing.TB, b []byte) []byte {
	t.Helper()
	n := int(binary.LittleEndian.Uint32(b))
	return b[4+n-16 : 4+n]
}

func TestVectors(t *testing.T) {
	vectortest.Each(t, vectortest.Frame, func(t *testing.T, c vectortest.Case, raw []byte) {
		got := mustDecode(t, raw)
		if err := vectortest.SameValue(got, vectortest.Want(t, c)); err != nil {
			t.Fatalf("Decode vs JSON: %v", err)
		}
		if c.Msgpack == "" {
			return // conj_tensor: the reference refuses its msgpack form
		}
		mp := vectortest.Read(t, c.Msgpack)
		plain, err := wire.Unmarshal(mp)
		if err != nil {
			t.Fatal(err)
		}
		if err := vectortest.SameValue(got, plain); err != nil {
			t.Fatalf("Decode(frame) vs Unmarshal(msgpack): %v", err)
		}
		// Into supplied memory, both forms decode to the same value, and
		// nothing of it aliases the input.
		into, err := frame.DecodeInto(raw, frame.NewArena(make([]byte, 2*len(raw))))
		if err != nil {
			t.Fatal(err)
		}
		if err := vectortest.SameValue(into, plain); err != nil {
			t.Fatalf("DecodeInto(frame) vs Unmarshal(msgpack): %v", err)
		}
		mpInto, err := frame.UnmarshalInto(mp, frame.NewArena(make([]byte, len(mp))))
		if err != nil {
			t.Fatal(err)
		}
		if err := vectortest.SameValue(mpInto, plain); err != nil {
			t.Fatalf("UnmarshalInto(msgpack) vs Unmarshal(msgpack): %v", err)
		}
		// The msgpack form in pieces is the reference's byte for byte.
		var pieces wire.Pieces
		if err := wire.MarshalPieces(&pieces, decodeOrdered(t, mp), 1); err != nil {
			t.Fatal(err)
		}
		whole := make([]byte, pieces.Size())
		if err := pieces.Write(whole); err != nil || !bytes.Equal(whole, mp) {
			t.Fatalf("pieces (%v) differ:\n got %x\nwant %x", err, whole, mp)
		}
		if joined := bytes.Join(pieces.Parts(nil), nil); !bytes.Equal(joined, mp) {
			t.Fatalf("parts differ:\n got %x\nwant %x", joined, mp)
		}
		// Prepared again in the reference's map order, the frame is the
		// reference's byte for byte but for the random nonce.
		_, ours := encode(t, decodeOrdered(t, mp), 0)
		ours = bytes.ReplaceAll(ours, nonceOf(t, ours), nonceOf(t, raw))
		if !bytes.Equal(ours, raw) {
			t.Fatalf("frame differs:\n got %x\nwant %x", ours, raw)
		}
	})
}

// decodeOrdered decodes msgpack with its maps in wire order, as Python
// dicts keep them.
func decodeOrdered(t testing.TB, mp []byte) any {
	t.Helper()
	v, err := (&wire.Decoder{Ordered: true}).Decode(mp)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTensorFreeTreeIsPlainMsgpack(t *testing.T) {
	vectortest.Each(t, vectortest.Msgpack, func(t *testing.T, c vectortest.Case, mp []byte) {
		if !c.FrameIsPlainMsgpack {
			return
		}
		v := decodeOrdered(t, mp)
		p, out := encode(t, v, 1)
		if p.Tensors() {
			t.Fatal("a tensor-free tree made a tensor frame")
		}
		if !bytes.Equal(out, mp) {
			t.Fatalf("plain form differs from the reference:\n got %x\nwant %x", out, mp)
		}
		want, err := wire.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, want) {
			t.Fatal("plain form differs from wire.Marshal")
		}
		if m, err := frame.Marshal(v); err != nil || !bytes.Equal(m, want) {
			t.Fatalf("Marshal: %v, %x; want the plain form", err, m)
		}
	})
}

// TestDetect: Detect tells every vector's two forms apart, and refuses cut
// or mangled frames without reading out of bounds.
func TestDetect(t *testing.T) {
	vectortest.Each(t, vectortest.Msgpack, func(t *testing.T, c vectortest.Case, b []byte) {
		if frame.Detect(b) {
			t.Errorf("%s taken for a frame", c.Msgpack)
		}
	})
	vectortest.Each(t, vectortest.Frame, func(t *testing.T, c vectortest.Case, b []byte) {
		if !frame.Detect(b) {
			t.Errorf("%s not recognised", c.Frame)
		}
		// Cut before the data start, it is no longer a frame.
		n := int(binary.LittleEndian.Uint32(b))
		if frame.Detect(b[:4+n-1]) || frame.Detect(b[:3]) {
			t.Errorf("cut %s taken for a frame", c.Frame)
		}
	})
	good := build("93 91 93a5696e743634 9101 00 "+refTree+nonceHex, 8)
	for name, b := range map[string][]byte{
		"empty":          nil,
		"length u32 max": {0xff, 0xff, 0xff, 0xff},
		"empty header":   {0, 0, 0, 0},
		"one byte":       {1, 0, 0, 0, 0x93},
		"short nonce":    build("93 91 93a5696e743634 9101 00 "+refTree+"c40f"+nonceHex[5:35], 8),
		"bad descriptor": build("93 91 93a5696e743132 9101 00 "+refTree+nonceHex, 8),
		"data cut":       good[:len(good)-1],
	} {
		if frame.Detect(b) {
			t.Errorf("%s: Detect(%x) = true", name, b)
		}
	}
	if !frame.Detect(good) {
		t.Error("the well-formed base case is not detected")
	}
}

var allDTypes = []tensor.DType{
	tensor.Bool, tensor.Uint8, tensor.Int8, tensor.Int16, tensor.Int32, tensor.Int64,
	tensor.Uint16, tensor.Uint32, tensor.Uint64, tensor.Float16, tensor.BFloat16,
	tensor.Float32, tensor.Float64, tensor.Complex64, tensor.Complex128,
}

// filled returns a tensor of the shape whose bytes count up from seed.
func filled(t testing.TB, dt tensor.DType, seed byte, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.Zeros(dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range x.Data {
		x.Data[i] = seed + byte(i)
	}
	if dt == tensor.Bool {
		for i := range x.Data {
			x.Data[i] &= 1
		}
	}
	return x
}

func TestRoundTripEveryDType(t *testing.T) {
	for _, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			payload := map[string]any{
				"codes":  map[string]any{"audio": filled(t, dt, 1, 4, 6)},
				"empty":  filled(t, dt, 0, 0),
				"empty2": filled(t, dt, 0, 3, 0, 2),
				"scalar": filled(t, dt, 7),
				"deep":   []any{[]any{map[string]any{"x": []any{filled(t, dt, 9, 3)}}}},
				"n":      int64(-5),
				"f":      0.25,
				"s":      "text",
				"b":      []byte{0, 1},
				"none":   nil,
				"marker": map[string]any{"__tensor__": false, "dtype": "x", "shape": []any{}, "data": []byte{}},
			}
			p, buf := encode(t, payload, 0)
			if !p.Tensors() {
				t.Fatal("no tensor frame for a tree with tensors")
			}
			got := mustDecode(t, buf)
			plain, _ := wire.Marshal(payload)
			want, _ := wire.Unmarshal(plain)
			if err := vectortest.SameValue(got, want); err != nil {
				t.Fatal(err)
			}
			m := got.(map[string]any)
			if s := m["scalar"].(*tensor.Tensor); len(s.Shape) != 0 || len(s.Data) != dt.ItemSize() {
				t.Fatalf("0-d tensor came back as %v", s)
			}
			if _, ok := m["marker"].(map[string]any); !ok {
				t.Fatalf("a false marker map became %T", m["marker"])
			}
		})
	}
}

func TestTypedPayloadMatchesReference(t *testing.T) {
	payload := vectortest.TypedPayload(t)
	mp, err := wire.Marshal(*payload) // a struct value, not only a pointer
	if err != nil {
		t.Fatal(err)
	}
	if want := vectortest.Read(t, "typed_payload.msgpack"); !bytes.Equal(mp, want) {
		t.Fatalf("msgpack differs:\n got %x\nwant %x", mp, want)
	}
	_, ours := encode(t, payload, 0)
	ref := vectortest.Read(t, "typed_payload.frame")
	ours = bytes.ReplaceAll(ours, nonceOf(t, ours), nonceOf(t, ref))
	if !bytes.Equal(ours, ref) {
		t.Fatalf("frame differs:\n got %x\nwant %x", ours, ref)
	}
	got := mustDecode(t, ours)
	m := got.(map[string]any)
	if len(m) != 3 || len(m["codes"].(map[string]any)) != 1 {
		t.Fatalf("omitted fields travelled: %v", m)
	}
	if m["meta"].(map[string]any)["left_context_size"] != int64(0) {
		t.Fatalf("left_context_size = %v", m["meta"])
	}
}

func TestArraysAndImagesKeepMarkerMaps(t *testing.T) {
	arr := &tensor.Array{DType: "<i4", Shape: []int{2, 2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}}
	img := &tensor.Image{Mode: "RGB", Shape: []int{1, 2, 3}, Data: []byte{1, 2, 3, 4, 5, 6}}
	payload := map[string]any{"a": arr, "img": img, "t": filled(t, tensor.Float32, 1, 2), "slice": []any{1, 7, 2}}
	_, buf := encode(t, payload, 0)
	if !bytes.Contains(buf, []byte("__ndarray__")) || !bytes.Contains(buf, []byte("__pil_image__")) || bytes.Contains(buf, []byte("__tensor__")) {
		t.Fatal("arrays and images must keep marker maps, tensors must not")
	}
	got := mustDecode(t, buf)
	m := got.(map[string]any)
	if !m["a"].(*tensor.Array).Equal(arr) || !m["img"].(*tensor.Image).Equal(img) {
		t.Fatalf("leaves changed: %v", m)
	}
}

func TestLiteralExtStaysLiteral(t *testing.T) {
	ours := filled(t, tensor.Int64, 0, 2)
	// Same shape as a reference, but a foreign nonce; and another code.
	foreign := wire.Ext{Code: 42, Data: make([]byte, 20)}
	short := wire.Ext{Code: 42, Data: []byte{1, 2, 3}}
	other := wire.Ext{Code: 7, Data: []byte{9}}
	_, buf := encode(t, []any{ours, foreign, short, other}, 0)
	got := mustDecode(t, buf)
	if err := vectortest.SameValue(got, []any{ours, foreign, short, other}); err != nil {
		t.Fatal(err)
	}
}

// A reference carrying this frame's nonce but a bad index is corrupt.
func TestReferenceIndexOutOfRange(t *testing.T) {
	_, buf := encode(t, []any{filled(t, tensor.Uint8, 0, 3)}, 0)
	nonce := nonceOf(t, buf)
	at := bytes.Index(buf, nonce) // the tree's reference comes first
	binary.LittleEndian.PutUint32(buf[at+16:], 1)
	if _, err := frame.Decode(buf); !errors.Is(err, frame.ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

func TestSourceOwnership(t *testing.T) {
	src := filled(t, tensor.Int64, 1, 56)
	_, buf := encode(t, map[string]any{"codes": src}, 0)
	got := mustDecode(t, buf)
	want := src.Clone()
	clear(src.Data)
	clear(buf) // the ring slot is reused
	if tt := got.(map[string]any)["codes"].(*tensor.Tensor); !tt.Equal(want) {
		t.Fatalf("decoded tensor changed with its source: %v", tt)
	}
}

// TestTypedSliceIsATensor: a typed numeric slice in the payload takes the
// tensor frame path as the 1-D tensor it is, byte for byte the frame of
// that tensor put explicitly (only the nonce differs): it comes back as a
// *tensor.Tensor.
func TestTypedSliceIsATensor(t *testing.T) {
	type code int32
	hidden := []float32{0.5, -1.25, 3}
	codes := [2]code{7, -8}
	p, buf := encode(t, map[string]any{"hidden": hidden, "codes": codes}, 0)
	if !p.Tensors() {
		t.Fatal("a []float32 made no tensor frame")
	}
	h, _ := tensor.FromSlice(hidden)
	c, _ := tensor.FromSlice([]int32{7, -8})
	_, want := encode(t, map[string]any{"hidden": h, "codes": c}, 0)
	want = bytes.ReplaceAll(want, nonceOf(t, want), nonceOf(t, buf)) // in the header and each reference
	if !bytes.Equal(buf, want) {
		t.Fatalf("typed slices framed differently from their tensors:\n got %x\nwant %x", buf, want)
	}
}

func within(inner, outer []byte) bool {
	if cap(inner) == 0 || cap(outer) == 0 {
		return false
	}
	i := uintptr(unsafe.Pointer(unsafe.SliceData(inner)))
	o := uintptr(unsafe.Pointer(unsafe.SliceData(outer)))
	return i >= o && i < o+uintptr(cap(outer))
}

func TestLargeFrameGivesEachTensorItsOwner(t *testing.T) {
	got := mustDecode(t, vectortest.Read(t, "large_owner.frame"))
	m := got.(map[string]any)
	hidden, finished := m["hidden"].(*tensor.Tensor), m["finished"].(*tensor.Tensor)
	if len(hidden.Data) != 65536 || cap(hidden.Data) != 65536 {
		t.Fatalf("hidden: len %d cap %d", len(hidden.Data), cap(hidden.Data))
	}
	if cap(finished.Data) != 1 || within(finished.Data, hidden.Data) || within(hidden.Data, finished.Data) {
		t.Fatal("the 1-byte tensor shares the 64 KiB tensor's allocation")
	}
}

func TestSmallFrameSharesOneAllocation(t *testing.T) {
	a, b := filled(t, tensor.Int64, 1, 8), filled(t, tensor.Uint8, 2, 3)
	_, buf := encode(t, []any{a, b}, 0)
	got := mustDecode(t, buf)
	l := got.([]any)
	ga, gb := l[0].(*tensor.Tensor), l[1].(*tensor.Tensor)
	// b follows a at the next 16-aligned offset of one storage.
	if unsafe.SliceData(gb.Data) != (*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(ga.Data)), 64)) {
		t.Fatal("small frame's tensors are not in one allocation")
	}
	if cap(ga.Data) != 64 {
		t.Fatalf("a tensor's capacity %d reaches into its neighbour", cap(ga.Data))
	}
	if !ga.Equal(a) || !gb.Equal(b) {
		t.Fatal("values changed")
	}
}

func TestDecodeOwnedSharesTheBufferWhereOneAllocationIsShared(t *testing.T) {
	big := filled(t, tensor.Float32, 1, 100000) // one tensor: shares whatever its size
	small := []any{filled(t, tensor.Int64, 1, 8), filled(t, tensor.Uint8, 2, 3)}
	large := []any{filled(t, tensor.Uint8, 1, 70000), filled(t, tensor.Uint8, 2, 3)}
	for _, c := range []struct {
		name  string
		v     any
		alias bool
	}{{"single", big, true}, {"small", small, true}, {"large", large, false}} {
		_, buf := encode(t, c.v, 0)
		want := mustDecode(t, buf)
		got, err := frame.DecodeOwned(buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := vectortest.SameValue(got, want); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var first *tensor.Tensor
		if l, ok := got.([]any); ok {
			first = l[0].(*tensor.Tensor)
		} else {
			first = got.(*tensor.Tensor)
		}
		if within(first.Data, buf) != c.alias {
			t.Fatalf("%s: tensor data within the handed-over buffer: %v, want %v", c.name, !c.alias, c.alias)
		}
		if l, ok := got.([]any); ok && cap(l[0].(*tensor.Tensor).Data) != len(l[0].(*tensor.Tensor).Data) {
			t.Fatalf("%s: a tensor's capacity reaches into its neighbour", c.name)
		}
	}
}

func TestWriteZeroesPaddingAndChecksDestination(t *testing.T) {
	p, _ := encode(t, []any{filled(t, tensor.Uint8, 1, 3), filled(t, tensor.Uint8, 1, 5)}, 0)
	// Two destinations that differ in every byte come out equal only if
	// Write wrote every byte (the random nonce makes a single fill pattern
	// an unreliable witness).
	zeros, ones := make([]byte, p.Size()), bytes.Repeat([]byte{0xff}, p.Size())
	if err := p.Write(zeros); err != nil {
		t.Fatal(err)
	}
	if err := p.Write(ones); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(zeros, ones) {
		t.Fatal("Write left bytes of the destination unwritten")
	}
	if err := p.Write(make([]byte, p.Size()-1)); err == nil {
		t.Fatal("Write accepted a short destination")
	}
}

func TestLimit(t *testing.T) {
	big := filled(t, tensor.Float32, 0, 1024)
	cases := []struct {
		name    string
		payload any
		limit   int
		refused bool
	}{
		{"fits", map[string]any{"t": big}, 8192, false},
		{"tensor data past the limit", map[string]any{"t": big}, 4095, true},
		{"header pushes it past", map[string]any{"t": big}, 4096 + 8, true},
		{"second tensor passes it", []any{filled(t, tensor.Uint8, 0, 60), filled(t, tensor.Uint8, 0, 60)}, 100, true},
		{"array past the limit", map[string]any{"a": &tensor.Array{DType: "<f8", Shape: []int{1024}, Data: make([]byte, 8192)}}, 1024, true},
		{"image past the limit", &tensor.Image{Mode: "L", Shape: []int{64, 64}, Data: make([]byte, 4096)}, 1024, true},
		{"no limit", map[string]any{"t": big}, 0, false},
		{"plain tree larger than the limit", make([]int, 100), 10, false}, // like the reference: caller checks Size
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := frame.Prepare(c.payload, c.limit)
			if c.refused {
				if !errors.Is(err, frame.ErrTooLarge) {
					t.Fatalf("err = %v, want ErrTooLarge", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.limit > 0 && p.Tensors() && p.Size() > c.limit {
				t.Fatalf("size %d over limit %d", p.Size(), c.limit)
			}
		})
	}
}

// A refused array or image is never snapshotted: refusing a 64 MiB array
// allocates nothing near its size (the seed's
// test_large_array_rejects_unused_framing_snapshot).
func TestLimitRefusesWithoutCopying(t *testing.T) {
	arr := &tensor.Array{DType: "<f8", Shape: []int{8 << 20}, Data: make([]byte, 64<<20)}
	img := &tensor.Image{Mode: "L", Shape: []int{8192, 8192}, Data: make([]byte, 64<<20)}
	huge := filled(t, tensor.Uint8, 0, 64<<20)
	for name, v := range map[string]any{"array": arr, "image": img, "tensor": huge} {
		payload := map[string]any{"leaf": v, "small": filled(t, tensor.Int64, 0, 4)}
		var before, after testingMem
		before.read()
		allocs := testing.AllocsPerRun(5, func() {
			if _, err := frame.Prepare(payload, 1<<20); !errors.Is(err, frame.ErrTooLarge) {
				t.Fatalf("%s: err = %v", name, err)
			}
		})
		after.read()
		perRun := (after.bytes - before.bytes) / 6
		if perRun > 64<<10 {
			t.Fatalf("%s: refusing allocated %d bytes per run (%v allocs): data was copied", name, perRun, allocs)
		}
	}
}

// Prepare keeps references, not copies: data changed between Prepare and
// Write is what travels, and a changed size is refused.
func TestPrepareReferencesSources(t *testing.T) {
	src := filled(t, tensor.Uint8, 1, 32)
	p, err := frame.Prepare(map[string]any{"t": src}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Data {
		src.Data[i] = 0xab
	}
	buf := make([]byte, p.Size())
	if err := p.Write(buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(buf, bytes.Repeat([]byte{0xab}, 32)) {
		t.Fatal("Write did not copy the source as it is at Write time")
	}
	src.Data = src.Data[:16]
	src.Shape = []int{16}
	if err := p.Write(buf); err == nil {
		t.Fatal("Write accepted a source whose size changed since Prepare")
	}
}

// A released Prepared serves later payloads exactly as a new one would: a
// small tree or a large one, with tensors or without, in any order.
func TestReleaseReuse(t *testing.T) {
	large := make([]any, 200) // a tree past the inline buffer
	for i := range large {
		large[i] = int64(i) << 20
	}
	payloads := []any{
		map[string]any{"t": filled(t, tensor.Float32, 2, 3, 4)},
		map[string]any{"ids": large},
		map[string]any{"a": filled(t, tensor.Int64, 1, 5), "b": filled(t, tensor.Uint8, 3, 7), "n": "x"},
		"plain",
		map[string]any{"ids": large, "t": filled(t, tensor.Int16, 4, 2)},
	}
	for round := range 3 {
		for i, v := range payloads {
			want, err := frame.Marshal(v) // its own Prepared, released inside
			if err != nil {
				t.Fatal(err)
			}
			p, err := frame.Prepare(v, 0)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, p.Size())
			if err := p.Write(got); err != nil {
				t.Fatal(err)
			}
			tensors := p.Tensors()
			p.Release()
			if tensors != frame.Detect(want) {
				t.Fatalf("round %d payload %d: Tensors() = %v after reuse", round, i, tensors)
			}
			if frame.Detect(got) {
				// Nonces differ per message: compare what they decode to.
				a, errA := frame.Decode(got)
				b, errB := frame.Decode(want)
				if errA != nil || errB != nil {
					t.Fatalf("round %d payload %d: %v, %v", round, i, errA, errB)
				}
				if err := vectortest.SameValue(a, b); err != nil {
					t.Fatalf("round %d payload %d: %v", round, i, err)
				}
			} else if !bytes.Equal(got, want) {
				t.Fatalf("round %d payload %d: %x, want %x", round, i, got, want)
			}
		}
	}
}

// The put and get of a small payload allocate only what the codec must: a
// put nothing (its Prepared is released and reused), a get the tensor data,
// one block for the tensors and their shapes, and the result's map.
func TestSmallFrameAllocations(t *testing.T) {
	payload := map[string]any{"codes": filled(t, tensor.Int64, 0, 56)}
	buf := make([]byte, 4096)
	var size int
	put := testing.AllocsPerRun(100, func() {
		p, err := frame.Prepare(payload, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		size = p.Size()
		if err := p.Write(buf[:size]); err != nil {
			t.Fatal(err)
		}
		p.Release()
	})
	get := testing.AllocsPerRun(100, func() {
		if _, err := frame.Decode(buf[:size]); err != nil {
			t.Fatal(err)
		}
	})
	if race.Enabled {
		put = 0
	}
	// The map is a header and a group of slots (Go's maps since 1.24).
	if put != 0 || get > 4 {
		t.Fatalf("a small frame costs %v allocations to put, %v to get; want 0 and at most 4", put, get)
	}
}

// The tensors and shapes of the usual frames take one block of their
// size: a stream chunk's two tensors (its payload and the 0-d finished
// mark) not the 384 B block of up to four.
func TestRefsBlockFitsTheFrame(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector's allocations are not the program's")
	}
	for _, c := range []struct {
		name          string
		tensors, dims int
		most          uint64
	}{
		{"one tensor", 1, 2, 160},
		{"a stream chunk: a tensor and a 0-d mark", 2, 2, 224},
		{"two tensors of two dimensions", 2, 4, 224},
		{"four tensors", 4, 8, 384},
	} {
		if got := frame.RefsBytes(c.tensors, c.dims); got > c.most {
			t.Errorf("%s: %d B for its tensors and shapes, want at most %d", c.name, got, c.most)
		}
	}
}

// DecodeInto puts each tensor's bytes in the supplied memory, one 64-aligned
// allocation each, and the result keeps nothing of the frame.
func TestDecodeIntoSuppliedMemory(t *testing.T) {
	for _, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			// Around SPEC §4's 64 KiB rule: one large tensor and a small one.
			n := (64<<10)/dt.ItemSize() + 1
			a, b := filled(t, dt, 3, n), filled(t, dt, 5, 3)
			_, raw := encode(t, map[string]any{"a": a, "b": b}, 0)
			buf := make([]byte, len(a.Data)+len(b.Data)+128)
			arena := frame.NewArena(buf)
			v, err := frame.DecodeInto(raw, arena)
			if err != nil {
				t.Fatal(err)
			}
			m := v.(map[string]any)
			ga, gb := m["a"].(*tensor.Tensor), m["b"].(*tensor.Tensor)
			if !ga.Equal(a) || !gb.Equal(b) {
				t.Fatal("values differ")
			}
			if !within(ga.Data, buf) || !within(gb.Data, buf) || within(ga.Data, raw) || within(gb.Data, raw) {
				t.Fatal("tensors are not in the supplied memory")
			}
			if off := uintptr(unsafe.Pointer(&gb.Data[0])) - uintptr(unsafe.Pointer(&buf[0])); off%64 != 0 {
				t.Fatalf("second tensor at offset %d, not 64-aligned", off)
			}
		})
	}
}

// Tensors of sizes around the copies' chunk (512 KiB) and Go's 1 MiB
// non-temporal threshold come back byte for byte, through Decode and
// DecodeInto; the bytes do not repeat with any power-of-two period, so a
// chunk copied to the wrong place shows.
func TestLargeTensorsAcrossCopyChunks(t *testing.T) {
	for _, size := range []int{512<<10 - 1, 512 << 10, 512<<10 + 1, 1<<20 - 1, 1 << 20, 1<<20 + 1, 2<<20 + 17} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			x := filled(t, tensor.Uint8, 0, size)
			for i := range x.Data {
				x.Data[i] = byte(i*31 + i>>9 + i>>17)
			}
			_, raw := encode(t, map[string]any{"x": x}, 0)
			buf := make([]byte, size+64)
			for _, into := range []bool{false, true} {
				var v any
				var err error
				if into {
					v, err = frame.DecodeInto(raw, frame.NewArena(buf))
				} else {
					v, err = frame.Decode(raw)
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := v.(map[string]any)["x"].(*tensor.Tensor); !bytes.Equal(got.Data, x.Data) {
					t.Fatalf("into=%v: bytes differ", into)
				}
			}
		})
	}
}

// A supplied buffer too small is an error naming the sizes, and nothing is
// written into it; so is a frame that does not decode.
func TestDecodeIntoFailureLeavesMemoryUntouched(t *testing.T) {
	tt := filled(t, tensor.Float32, 1, 1000)
	_, raw := encode(t, map[string]any{"t": tt, "u": filled(t, tensor.Int8, 2, 10)}, 0)
	corruptTree := bytes.Clone(raw)
	// The tree's first byte (a map header) made a reserved msgpack code.
	tree := bytes.Index(corruptTree, []byte{0x82, 0xa1, 't'})
	if tree < 0 {
		t.Fatal("tree not found")
	}
	corruptTree[tree] = 0xc1
	for _, tc := range []struct {
		name string
		raw  []byte
		size int
		want error
		text string
	}{
		{"short", raw, 4000 - 1, io.ErrShortBuffer, "need 4000"},
		{"short-second", raw, 4000 + 5, io.ErrShortBuffer, "need 10"},
		{"corrupt-tree", corruptTree, 8192, frame.ErrCorrupt, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := bytes.Repeat([]byte{0xAA}, tc.size)
			_, err := frame.DecodeInto(tc.raw, frame.NewArena(buf))
			if !errors.Is(err, tc.want) || errors.Is(err, frame.ErrWritten) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want %v naming %q", err, tc.want, tc.text)
			}
			if tc.want == io.ErrShortBuffer && !errors.Is(err, frame.ErrAllocate) {
				t.Fatalf("err = %v, want frame.ErrAllocate", err)
			}
			if !bytes.Equal(buf, bytes.Repeat([]byte{0xAA}, tc.size)) {
				t.Fatal("the supplied memory was written")
			}
		})
	}
	// Plain msgpack is copied first: its failure says the memory was written.
	if _, err := frame.UnmarshalInto([]byte{0xc1}, frame.NewArena(make([]byte, 1))); !errors.Is(err, frame.ErrWritten) {
		t.Fatalf("UnmarshalInto(corrupt) = %v, want ErrWritten", err)
	}
	if _, err := frame.UnmarshalInto([]byte{0x90}, new(frame.Arena)); !errors.Is(err, io.ErrShortBuffer) || errors.Is(err, frame.ErrWritten) {
		t.Fatalf("UnmarshalInto into the zero Arena = %v", err)
	}
}

// Decoding into supplied memory allocates nothing the size of the data.
func TestDecodeIntoAllocations(t *testing.T) {
	tt := filled(t, tensor.Float32, 1, 256<<10)
	_, raw := encode(t, map[string]any{"t": tt}, 0)
	buf := make([]byte, len(tt.Data))
	var arena frame.Arena
	into := testing.AllocsPerRun(100, func() {
		arena.Reset(buf)
		if _, err := frame.DecodeInto(raw, &arena); err != nil {
			t.Fatal(err)
		}
	})
	plain := testing.AllocsPerRun(100, func() {
		if _, err := frame.Decode(raw); err != nil {
			t.Fatal(err)
		}
	})
	if into >= plain {
		t.Fatalf("DecodeInto allocates %v times, Decode %v", into, plain)
	}
}
