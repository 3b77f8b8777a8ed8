//go:build linux

package connector_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
	"weak"

	"omnishm/connector"
	"omnishm/frame"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/internal/vectortest"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/tensor"
	"omnishm/wire"
)

// The cases of the seed's test_shm_ring.py, on a 4096-byte ring.

func transposed(t *testing.T, dtype tensor.DType) (*tensor.Tensor, []byte) {
	t.Helper()
	// arange(24).reshape(4, 6).T made contiguous: element (i, j) = j*6 + i.
	size := dtype.ItemSize()
	src, _ := tensor.Zeros(dtype, 6, 4)
	for i := 0; i < 6; i++ {
		for j := 0; j < 4; j++ {
			v := j*6 + i
			off := (i*4 + j) * size
			switch dtype {
			case tensor.Bool:
				if v != 0 {
					src.Data[off] = 1
				}
			case tensor.Float16:
				h := tensor.HalfFrom(float32(v))
				src.Data[off], src.Data[off+1] = byte(h), byte(h>>8)
			case tensor.BFloat16:
				h := tensor.BHalfFrom(float32(v))
				src.Data[off], src.Data[off+1] = byte(h), byte(h>>8)
			case tensor.Float32, tensor.Complex64:
				putFloat32(src.Data[off:], float32(v))
			case tensor.Float64:
				putFloat64(src.Data[off:], float64(v))
			default:
				for b := 0; b < size && b < 8; b++ {
					src.Data[off+b] = byte(uint64(v) >> (8 * b))
				}
			}
		}
	}
	return src, append([]byte(nil), src.Data...)
}

func TestOwnedTensorTreePreservesValuesShapesAndTypes(t *testing.T) {
	dtypes := []tensor.DType{tensor.Bool, tensor.Uint8, tensor.Int16, tensor.Int32, tensor.Int64,
		tensor.Float16, tensor.BFloat16, tensor.Float32, tensor.Float64, tensor.Complex64}
	for _, dtype := range dtypes {
		t.Run(dtype.String(), func(t *testing.T) {
			sender, receiver := conntest.Edge(t, 4096)
			tt, want := transposed(t, dtype)
			row := &tensor.Tensor{DType: dtype, Shape: []int{4}, Data: tt.Data[:4*dtype.ItemSize()]}
			empty, _ := tensor.Zeros(dtype, 0)
			data := map[string]any{
				"codes":      map[string]any{"audio": tt},
				"other":      []any{row, []any{empty, tensor.Scalar[int64](1)}},
				"__tensor__": false,
				"meta":       map[string]any{"finished": tensor.Scalar(false)},
			}
			size, d := 0, connector.Descriptor{}
			var err error
			if size, d, err = sender.Put("0", "1", "tree", data); err != nil || d.HostRing == nil {
				t.Fatalf("put: %v %+v", err, d)
			}
			out, readSize, ok, err := receiver.Get("0", "1", "tree", &d)
			if err != nil || !ok || readSize != size {
				t.Fatalf("get: ok=%v size=%d/%d err=%v", ok, readSize, size, err)
			}
			m := out.(map[string]any)
			if m["__tensor__"] != false {
				t.Fatalf("__tensor__ = %v", m["__tensor__"])
			}
			other := m["other"].([]any)
			inner := other[1].([]any)
			if s := inner[0].(*tensor.Tensor).Shape; !slices.Equal(s, []int{0}) {
				t.Fatalf("empty shape %v", s)
			}
			if s := inner[1].(*tensor.Tensor).Shape; len(s) != 0 {
				t.Fatalf("scalar shape %v", s)
			}
			audio := m["codes"].(map[string]any)["audio"].(*tensor.Tensor)
			if audio.DType != dtype || !slices.Equal(audio.Shape, []int{6, 4}) || string(audio.Data) != string(want) {
				t.Fatalf("audio %v differs", audio)
			}
			clear(tt.Data) // the receiver owns its copy
			if string(audio.Data) != string(want) {
				t.Fatal("received tensor aliases the source")
			}
			for i := range 100 {
				key := "wrap" + strconv.Itoa(i)
				conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(56, int64(i)))
				got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, nil))
				if got[0] != int64(i) || got[55] != int64(i+55) {
					t.Fatalf("wrap %d: got %v", i, got[:2])
				}
			}
			if string(audio.Data) != string(want) {
				t.Fatal("received tensor changed after wraparound")
			}
		})
	}
}

// The seed's test_conjugate_tensor_and_scalar_finish: a complex tensor (the
// resolved conjugate of [1+2j, 3-4j]) and a 0-d bool finish mark.
func TestScalarFinish(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	cond, _ := tensor.Zeros(tensor.Complex64, 2)
	for i, v := range []float32{1, -2, 3, 4} {
		putFloat32(cond.Data[4*i:], v)
	}
	want := cond.Clone()
	conntest.MustPut(t, sender, "0", "1", "finish", map[string]any{"condition": cond, "finished": tensor.Scalar(true)})
	m := conntest.MustGet(t, receiver, "0", "1", "finish", nil).(map[string]any)
	f := m["finished"].(*tensor.Tensor)
	if f.DType != tensor.Bool || len(f.Shape) != 0 || f.Data[0] != 1 {
		t.Fatalf("finished = %v %v", f, f.Data)
	}
	if c := m["condition"].(*tensor.Tensor); !c.Equal(want) {
		t.Fatalf("condition = %v %v", c, c.Data)
	}
}

func TestTypedPayloadKeepsOmittedDefaults(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	p := vectortest.TypedPayload(t)
	if d := conntest.MustPut(t, sender, "0", "1", "typed", p); d.HostRing == nil {
		t.Fatalf("typed payload took %v", d)
	}
	m := conntest.MustGet(t, receiver, "0", "1", "typed", nil).(map[string]any)
	if keys := sortedKeys(m); !slices.Equal(keys, []string{"codes", "kv_metadata", "meta"}) {
		t.Fatalf("keys %v", keys)
	}
	c := m["codes"].(map[string]any)
	if keys := sortedKeys(c); !slices.Equal(keys, []string{"audio"}) {
		t.Fatalf("codes keys %v", keys)
	}
	if !c["audio"].(*tensor.Tensor).Equal(p.Codes.Audio) {
		t.Fatal("audio differs")
	}
	if v := m["meta"].(map[string]any)["left_context_size"]; v != int64(0) {
		t.Fatalf("left_context_size = %#v", v)
	}
	if b := m["kv_metadata"].(map[string]any)["binary_handle"]; string(b.([]byte)) != "\x00\xff\x10" {
		t.Fatalf("binary_handle = %v", b)
	}
}

func TestSourceCanBeOverwrittenAsSoonAsPutReturns(t *testing.T) {
	for _, ringBytes := range []int{4096, connector.NoRing} {
		sender, receiver := conntest.Edge(t, ringBytes)
		vals := make([]int64, 56)
		for i := range vals {
			vals[i] = int64(i)
		}
		src, _ := tensor.FromSlice(vals)
		conntest.MustPut(t, sender, "0", "1", "source-reuse", src)
		for i := range vals {
			vals[i] = -1
		}
		got := conntest.Int64s(t, conntest.MustGet(t, receiver, "0", "1", "source-reuse", nil))
		if got[0] != 0 || got[55] != 55 {
			t.Fatalf("ring=%d: got %v", ringBytes, got)
		}
	}
}

func TestMixedArrayImageAndTensor(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	arr := &tensor.Array{DType: "<i4", Shape: []int{4, 3}, Data: make([]byte, 48)}
	for i := range 12 {
		arr.Data[i*4] = byte(i * 2)
	}
	img := &tensor.Image{Mode: "RGB", Shape: []int{2, 3, 3}, Data: make([]byte, 18)}
	for i := range img.Data {
		img.Data[i] = byte(i)
	}
	wantArr, wantImg := append([]byte(nil), arr.Data...), append([]byte(nil), img.Data...)
	payload := map[string]any{"codes": conntest.Codes(28, 0)["codes"], "array": arr, "image": img, "slice": []any{1, 7, 2}}
	d := conntest.MustPut(t, sender, "0", "1", "mixed-native", payload)
	if d.HostRing == nil {
		t.Fatalf("mixed payload took %v", d)
	}
	m := conntest.MustGet(t, receiver, "0", "1", "mixed-native", &d).(map[string]any)
	ga, gi := m["array"].(*tensor.Array), m["image"].(*tensor.Image)
	if ga.DType != "<i4" || !slices.Equal(ga.Shape, []int{4, 3}) || string(ga.Data) != string(wantArr) {
		t.Fatalf("array %+v", ga)
	}
	if gi.Mode != "RGB" || string(gi.Data) != string(wantImg) {
		t.Fatalf("image %+v", gi)
	}
	if s := m["slice"].([]any); len(s) != 3 || s[0] != int64(1) || s[1] != int64(7) || s[2] != int64(2) {
		t.Fatalf("slice %v", s)
	}
	clear(arr.Data)
	clear(img.Data)
	if string(ga.Data) != string(wantArr) || string(gi.Data) != string(wantImg) {
		t.Fatal("received array or image aliases the source")
	}
}

func TestLargeTensorDoesNotShareOwnerWithSmallMetadata(t *testing.T) {
	c := conntest.Open(t, shmtest.Scope(t), "0", ring.DefaultCapacity)
	ones := make([]float32, 16384)
	for i := range ones {
		ones[i] = 1
	}
	hidden, _ := tensor.FromSlice(ones)
	conntest.MustPut(t, c, "0", "1", "large-owner", map[string]any{"hidden": hidden, "finished": tensor.Scalar(false)})
	m := conntest.MustGet(t, c, "0", "1", "large-owner", nil).(map[string]any)
	if f := m["finished"].(*tensor.Tensor); cap(f.Data) != 1 {
		t.Fatalf("finished keeps %d bytes alive", cap(f.Data))
	}
	if h := m["hidden"].(*tensor.Tensor); cap(h.Data) != 65536 {
		t.Fatalf("hidden holds %d bytes", cap(h.Data))
	}
}

func TestTensorFreeListsReuseNativeSerialization(t *testing.T) {
	ids := make([]any, 8192)
	cond := make([]any, 8192)
	for i := range ids {
		ids[i], cond[i] = int64(i), 0.25
	}
	payload := map[string]any{"prompt_token_ids": ids, "condition": cond}
	p, err := frame.Prepare(payload, 0)
	if err != nil || p.Tensors() {
		t.Fatalf("prepare: %v tensors=%v", err, p != nil && p.Tensors())
	}
	got := make([]byte, p.Size())
	p.Write(got)
	want, _ := wire.Marshal(payload)
	if string(got) != string(want) {
		t.Fatal("a tensor-free frame differs from the plain msgpack form")
	}
	c := conntest.Open(t, shmtest.Scope(t), "0", ring.DefaultCapacity)
	conntest.MustPut(t, c, "0", "1", "native-lists", payload)
	m := conntest.MustGet(t, c, "0", "1", "native-lists", nil).(map[string]any)
	if l := m["prompt_token_ids"].([]any); len(l) != 8192 || l[8191] != int64(8191) {
		t.Fatal("ids differ")
	}
}

func TestScalarListsAndLiteralExtensions(t *testing.T) {
	cond := make([]any, 8192)
	for i := range cond {
		cond[i] = 0.25
	}
	literal := wire.Ext{Code: 42, Data: make([]byte, 20)}
	c := conntest.Open(t, shmtest.Scope(t), "0", ring.DefaultCapacity)
	d := conntest.MustPut(t, c, "0", "1", "mixed-lists", map[string]any{"condition": cond, "codes": conntest.Codes(28, 0)["codes"], "extension": literal})
	if d.HostRing == nil {
		t.Fatalf("took %v", d)
	}
	m := conntest.MustGet(t, c, "0", "1", "mixed-lists", nil).(map[string]any)
	if e, ok := m["extension"].(wire.Ext); !ok || e.Code != 42 || string(e.Data) != string(literal.Data) {
		t.Fatalf("extension = %#v", m["extension"])
	}
	if got := conntest.Int64s(t, m["codes"]); got[27] != 27 {
		t.Fatal("codes differ")
	}
	if l := m["condition"].([]any); len(l) != 8192 || l[0] != 0.25 {
		t.Fatal("condition differs")
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func putFloat32(b []byte, f float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(f)) }
func putFloat64(b []byte, f float64) { binary.LittleEndian.PutUint64(b, math.Float64bits(f)) }

var allDTypes = []tensor.DType{
	tensor.Bool, tensor.Uint8, tensor.Int8, tensor.Int16, tensor.Int32, tensor.Int64,
	tensor.Uint16, tensor.Uint32, tensor.Uint64, tensor.Float16, tensor.BFloat16,
	tensor.Float32, tensor.Float64, tensor.Complex64, tensor.Complex128,
}

// patterned is a tensor of n items whose bytes are all distinct in a
// window of 251 (valid for every dtype: bools are 0 or 1).
func patterned(t testing.TB, dt tensor.DType, n int, seed byte) *tensor.Tensor {
	t.Helper()
	x, err := tensor.Zeros(dt, n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range x.Data {
		x.Data[i] = seed + byte(i%251)
		if dt == tensor.Bool {
			x.Data[i] &= 1
		}
	}
	return x
}

// copyPathRing is the ring of the copy-path tests: a quarter of 4 MiB
// holds frames past SPEC §4's 64 KiB rule, up to 1 MiB.
const copyPathRing = 4 << 20

// quarterLimit is the largest payload a frame under key may carry in a
// quarter of copyPathRing (SPEC §3).
func quarterLimit(key string) int { return copyPathRing/4 - 16 - len(key) }

// frameSize and plainSize are a payload's sizes as a tensor frame and as
// kind-0 bytes.
func frameSize(t testing.TB, v any) int {
	t.Helper()
	p, err := frame.Prepare(v, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	return p.Size()
}

func plainSize(t testing.TB, v any) int {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// quarterItems is the largest count of dt items for which size of
// {"t": tensor} still fits the quarter limit of key: from the overhead
// size adds to the data, then a step or two.
func quarterItems(t testing.TB, dt tensor.DType, key string, size func(testing.TB, any) int) int {
	t.Helper()
	limit, item := quarterLimit(key), dt.ItemSize()
	sizeOf := func(n int) int { return size(t, map[string]any{"t": patterned(t, dt, n, 0)}) }
	n0 := limit/item - 64
	n := (limit - (sizeOf(n0) - n0*item)) / item
	for n > 0 && sizeOf(n) > limit {
		n--
	}
	for sizeOf(n+1) <= limit {
		n++
	}
	return n
}

// After the copy changes, every dtype arrives byte for byte on both paths,
// with Get and with GetInto, at the sizes where the paths change: around
// the ring's quarter limit (the frame that just fits takes the ring, one
// item more goes per-key) and around SPEC §4's 64 KiB rule (a large tensor
// next to a small one). The per-key segment holds exactly wire.Marshal's
// bytes, written from the tensors in pieces.
func TestCopyPathsEveryDType(t *testing.T) {
	for _, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			ringS, ringR := conntest.Edge(t, copyPathRing)
			keyS, keyR := conntest.Edge(t, connector.NoRing)
			base := shmtest.Key("copy")
			limit := quarterLimit(base + "_000") // the keys below are as long
			asFrame := quarterItems(t, dt, base+"_000", frameSize)
			asPlain := quarterItems(t, dt, base+"_000", plainSize)
			owner := (64 << 10) / dt.ItemSize()
			cases := []struct {
				name    string
				payload map[string]any
			}{
				// The largest tensor frame, then one the ring takes as kind-0 bytes.
				{"frame-quarter", map[string]any{"t": patterned(t, dt, asFrame, 1)}},
				{"frame-quarter+1", map[string]any{"t": patterned(t, dt, asFrame+1, 2)}},
				// The largest kind-0 payload, then one that goes per-key.
				{"plain-quarter", map[string]any{"t": patterned(t, dt, asPlain, 3)}},
				{"plain-quarter+1", map[string]any{"t": patterned(t, dt, asPlain+1, 4)}},
				{"64KiB-1", map[string]any{"a": patterned(t, dt, owner-1, 5), "b": patterned(t, dt, 1, 6)}},
				{"64KiB+1", map[string]any{"a": patterned(t, dt, owner+1, 7), "b": patterned(t, dt, 3, 8)}},
			}
			for ci, tc := range cases {
				for ii, into := range []bool{false, true} {
					for pi, path := range []string{"ring", "perkey"} {
						sender, receiver := ringS, ringR
						if path == "perkey" {
							sender, receiver = keyS, keyR
						}
						key := base + "_" + strconv.Itoa(ci) + strconv.Itoa(ii) + strconv.Itoa(pi)
						d := conntest.MustPut(t, sender, "0", "1", key, tc.payload)
						fits := frameSize(t, tc.payload) <= limit || plainSize(t, tc.payload) <= limit
						if onRing := d.HostRing != nil; onRing != (path == "ring" && fits) {
							t.Fatalf("%s %s: descriptor %+v", tc.name, path, d)
						}
						if d.Shm != nil {
							seg, err := os.ReadFile(scope.Path(key))
							if err != nil {
								t.Fatal(err)
							}
							if want, _ := wire.Marshal(tc.payload); !bytes.Equal(seg, want) {
								t.Fatalf("%s %s: segment differs from wire.Marshal's bytes", tc.name, path)
							}
						}
						var got any
						var buf []byte
						if into {
							buf = make([]byte, 2*d.Size+1024)
							m, ok, err := receiver.GetInto("0", "1", key, nil, frame.NewArena(buf))
							if err != nil || !ok {
								t.Fatalf("%s %s: GetInto ok=%v %v", tc.name, path, ok, err)
							}
							got = m.Payload
						} else {
							got = conntest.MustGet(t, receiver, "0", "1", key, nil)
						}
						m := got.(map[string]any)
						for name, want := range tc.payload {
							g, ok := m[name].(*tensor.Tensor)
							if !ok || !g.Equal(want.(*tensor.Tensor)) {
								t.Fatalf("%s %s into=%v: %s differs", tc.name, path, into, name)
							}
							// Large tensors land in the supplied memory.
							if into && len(g.Data) >= 64<<10 && !within(g.Data, buf) {
								t.Fatalf("%s %s: %s is not in the supplied memory", tc.name, path, name)
							}
						}
					}
				}
			}
		})
	}
}

// bothPaths runs f as a subtest on an edge of each path: a ring that takes
// the tests' payloads, and per-key segments only.
func bothPaths(t *testing.T, f func(t *testing.T, sender, receiver *connector.SHM)) {
	for _, path := range []struct {
		name      string
		ringBytes int
	}{{"ring", copyPathRing}, {"perkey", connector.NoRing}} {
		t.Run(path.name, func(t *testing.T) {
			sender, receiver := conntest.Edge(t, path.ringBytes)
			f(t, sender, receiver)
		})
	}
}

// within reports whether inner lies inside outer's memory.
func within(inner, outer []byte) bool {
	if len(inner) == 0 || len(outer) == 0 {
		return false
	}
	lo, hi := uintptr(unsafe.Pointer(&outer[0])), uintptr(unsafe.Pointer(&outer[len(outer)-1]))
	return uintptr(unsafe.Pointer(&inner[0])) >= lo && uintptr(unsafe.Pointer(&inner[len(inner)-1])) <= hi
}

// The Python reference's vectors go through both paths into supplied
// memory and arrive as the reference says; the per-key segment is the
// reference's msgpack byte for byte.
func TestVectorsThroughBothPathsIntoSuppliedMemory(t *testing.T) {
	ringS, ringR := conntest.Edge(t, copyPathRing)
	keyS, keyR := conntest.Edge(t, connector.NoRing)
	vectortest.Each(t, vectortest.Msgpack, func(t *testing.T, c vectortest.Case, mp []byte) {
		ordered, err := (&wire.Decoder{Ordered: true}).Decode(mp)
		if err != nil {
			t.Fatal(err)
		}
		want := vectortest.Want(t, c)
		for _, path := range []string{"ring", "perkey"} {
			sender, receiver := ringS, ringR
			if path == "perkey" {
				sender, receiver = keyS, keyR
			}
			key := shmtest.Key(c.Name + "_" + path)
			d := conntest.MustPut(t, sender, "0", "1", key, ordered)
			if d.Shm != nil {
				if seg, err := os.ReadFile(scope.Path(key)); err != nil || !bytes.Equal(seg, mp) {
					t.Fatalf("%s: segment (%v) differs from the reference:\n got %x\nwant %x", path, err, seg, mp)
				}
			}
			m, ok, err := receiver.GetInto("0", "1", key, nil, frame.NewArena(make([]byte, 2*len(mp)+1024)))
			if err != nil || !ok {
				t.Fatalf("%s: GetInto ok=%v %v", path, ok, err)
			}
			if err := vectortest.SameValue(m.Payload, want); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
	})
}

// A supplied buffer too small is an error naming the size it needed; the
// memory is untouched and the publication stays, for a receive with room.
func TestGetIntoTooSmallKeepsThePublication(t *testing.T) {
	bothPaths(t, func(t *testing.T, sender, receiver *connector.SHM) {
		key := shmtest.Key("small")
		tt := patterned(t, tensor.Float32, 32<<10, 7)
		d := conntest.MustPut(t, sender, "0", "1", key, map[string]any{"t": tt})
		need := len(tt.Data) // a ring frame's tensor
		if d.Shm != nil {
			need = d.Size // a segment is read whole
		}
		buf := bytes.Repeat([]byte{0xAA}, need-1)
		_, ok, err := receiver.GetInto("0", "1", key, nil, frame.NewArena(buf))
		if ok || !errors.Is(err, io.ErrShortBuffer) || !errors.Is(err, frame.ErrAllocate) || !strings.Contains(err.Error(), "need "+strconv.Itoa(need)) {
			t.Fatalf("GetInto into %d bytes: ok=%v %v", len(buf), ok, err)
		}
		if !bytes.Equal(buf, bytes.Repeat([]byte{0xAA}, need-1)) {
			t.Fatal("the supplied memory was written")
		}
		m, ok, err := receiver.GetInto("0", "1", key, nil, frame.NewArena(make([]byte, need)))
		if err != nil || !ok || !m.Payload.(map[string]any)["t"].(*tensor.Tensor).Equal(tt) {
			t.Fatalf("GetInto with room: ok=%v %v", ok, err)
		}
	})
}

// Nothing keeps the supplied memory once GetInto returned: dropped by the
// caller, it is collected.
func TestGetIntoKeepsNoReference(t *testing.T) {
	bothPaths(t, func(t *testing.T, sender, receiver *connector.SHM) {
		key := shmtest.Key("kept")
		tt := patterned(t, tensor.Float32, 64<<10, 7)
		conntest.MustPut(t, sender, "0", "1", key, map[string]any{"t": tt})
		buf := make([]byte, 1<<20)
		wp := weak.Make(&buf[0])
		m, ok, err := receiver.GetInto("0", "1", key, nil, frame.NewArena(buf))
		if err != nil || !ok || !m.Payload.(map[string]any)["t"].(*tensor.Tensor).Equal(tt) {
			t.Fatalf("GetInto: ok=%v %v", ok, err)
		}
		buf, m = nil, connector.Message{}
		for range 10 {
			runtime.GC()
			if wp.Value() == nil {
				return
			}
		}
		t.Fatal("the supplied buffer is still referenced after GetInto returned")
	})
}

// A segment that does not decode is claimed, and the error says the
// supplied memory was written (the segment was read into it).
func TestGetIntoCorruptSegmentSaysWritten(t *testing.T) {
	receiver := conntest.Open(t, shmtest.Scope(t), "1", connector.NoRing)
	key := shmtest.Key("corrupt")
	for _, name := range []string{key, scope.LockName(key)} {
		if err := os.WriteFile(scope.Path(name), []byte{0xc1}, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, ok, err := receiver.GetInto("0", "1", key, nil, frame.NewArena(make([]byte, 16)))
	if ok || !errors.Is(err, frame.ErrWritten) {
		t.Fatalf("GetInto(corrupt) ok=%v %v, want frame.ErrWritten", ok, err)
	}
	if _, err := os.Lstat(scope.Path(key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("corrupt segment left: %v", err)
	}
}

// A receive into recycled memory allocates nothing the size of the payload;
// Get allocates the payload once more per message.
func TestGetIntoAllocations(t *testing.T) {
	bothPaths(t, func(t *testing.T, sender, receiver *connector.SHM) {
		payload := map[string]any{"t": patterned(t, tensor.Float32, 32<<10, 7)} // 128 KiB
		key := shmtest.Key("allocs")
		buf := make([]byte, 256<<10)
		var arena frame.Arena
		measure := func(into bool) (allocs float64, bytes uint64) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			allocs = testing.AllocsPerRun(50, func() {
				conntest.MustPut(t, sender, "0", "1", key, payload)
				if into {
					arena.Reset(buf)
					if _, ok, err := receiver.GetInto("0", "1", key, nil, &arena); !ok || err != nil {
						t.Fatal(ok, err)
					}
				} else {
					conntest.MustGet(t, receiver, "0", "1", key, nil)
				}
			})
			runtime.ReadMemStats(&after)
			return allocs, (after.TotalAlloc - before.TotalAlloc) / 51
		}
		plainAllocs, plainBytes := measure(false)
		intoAllocs, intoBytes := measure(true)
		t.Logf("per put+get: Get %v allocations, %d bytes; GetInto %v allocations, %d bytes", plainAllocs, plainBytes, intoAllocs, intoBytes)
		if intoAllocs > plainAllocs || plainBytes < 128<<10 || intoBytes >= 16<<10 {
			t.Fatalf("Get: %v allocations, %d bytes; GetInto: %v, %d bytes", plainAllocs, plainBytes, intoAllocs, intoBytes)
		}
	})
}

// RecvInto waits as Recv does and decodes into the supplied memory, on both
// paths, when the payload is claimed by the receive dispatcher for it; a
// buffer too small is its error and the publication stays for a Recv.
func TestRecvIntoThroughTheDispatcher(t *testing.T) {
	bothPaths(t, func(t *testing.T, sender, receiver *connector.SHM) {
		tt := patterned(t, tensor.Float32, 64<<10, 9)
		for _, room := range []int{4 << 20, 1024} {
			key := shmtest.Key("recvinto")
			buf := make([]byte, room)
			got := make(chan error, 1)
			var msg connector.Message
			go func() {
				var err error
				msg, err = receiver.RecvInto(t.Context(), "0", key, frame.NewArena(buf))
				got <- err
			}()
			// Until it waits, a put would be taken before the dispatcher.
			shmtest.Eventually(t, 10*time.Second, "RecvInto waiting", func() bool { return receiver.Waiting() > 0 })
			conntest.MustPut(t, sender, "0", "1", key, map[string]any{"t": tt})
			err := shmtest.Await(t, 10*time.Second, "RecvInto", got)
			if room < len(tt.Data) {
				if !errors.Is(err, frame.ErrAllocate) {
					t.Fatalf("RecvInto into %d bytes: %v", room, err)
				}
				if v := conntest.MustGet(t, receiver, "0", "1", key, nil); !v.(map[string]any)["t"].(*tensor.Tensor).Equal(tt) {
					t.Fatal("the publication left by RecvInto differs")
				}
				continue
			}
			g := msg.Payload.(map[string]any)["t"].(*tensor.Tensor)
			if err != nil || !g.Equal(tt) || !within(g.Data, buf) {
				t.Fatalf("RecvInto: %v (in the supplied memory: %v)", err, err == nil && within(g.Data, buf))
			}
		}
	})
}
