//go:build linux

package connector_test

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"testing"

	"omnishm/connector"
	"omnishm/frame"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
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

type codesStruct struct {
	Audio *tensor.Tensor `msgpack:"audio,omitempty"`
	Text  *tensor.Tensor `msgpack:"text,omitempty"`
}

type metaStruct struct {
	Finished        *tensor.Tensor `msgpack:"finished,omitempty"`
	LeftContextSize int            `msgpack:"left_context_size"`
	Speaker         string         `msgpack:"speaker,omitempty"`
}

type payloadStruct struct {
	Codes      *codesStruct   `msgpack:"codes,omitempty"`
	Hidden     *tensor.Tensor `msgpack:"hidden,omitempty"`
	Meta       *metaStruct    `msgpack:"meta,omitempty"`
	KVMetadata map[string]any `msgpack:"kv_metadata,omitempty"`
}

func TestTypedPayloadKeepsOmittedDefaults(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	audio := conntest.Codes(28, 0)["codes"].(*tensor.Tensor)
	audio.Shape = []int{1, 28}
	p := &payloadStruct{
		Codes:      &codesStruct{Audio: audio},
		Meta:       &metaStruct{Finished: tensor.Scalar(false), LeftContextSize: 0},
		KVMetadata: map[string]any{"binary_handle": []byte{0, 0xff, 0x10}},
	}
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
	if !c["audio"].(*tensor.Tensor).Equal(audio) {
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
