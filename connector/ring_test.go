package connector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"omnishm/descriptor"
	"omnishm/frame"
	"omnishm/internal/shmtest"
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
			sender, receiver := openEdge(t, 4096)
			tt, want := transposed(t, dtype)
			row := &tensor.Tensor{DType: dtype, Shape: []int{4}, Data: tt.Data[:4*dtype.ItemSize()]}
			empty, _ := tensor.Zeros(dtype, 0)
			data := map[string]any{
				"codes":      map[string]any{"audio": tt},
				"other":      []any{row, []any{empty, tensor.Scalar[int64](1)}},
				"__tensor__": false,
				"meta":       map[string]any{"finished": tensor.Scalar(false)},
			}
			size, d := 0, Descriptor{}
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
				key := "wrap" + itoa(i)
				mustPut(t, sender, "0", "1", key, codes(56, int64(i)))
				got := int64s(t, mustGet(t, receiver, "0", "1", key, nil).(map[string]any)["codes"])
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
	sender, receiver := openEdge(t, 4096)
	cond, _ := tensor.Zeros(tensor.Complex64, 2)
	for i, v := range []float32{1, -2, 3, 4} {
		putFloat32(cond.Data[4*i:], v)
	}
	want := cond.Clone()
	mustPut(t, sender, "0", "1", "finish", map[string]any{"condition": cond, "finished": tensor.Scalar(true)})
	m := mustGet(t, receiver, "0", "1", "finish", nil).(map[string]any)
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
	sender, receiver := openEdge(t, 4096)
	audio := codes(28, 0)["codes"].(*tensor.Tensor)
	audio.Shape = []int{1, 28}
	p := &payloadStruct{
		Codes:      &codesStruct{Audio: audio},
		Meta:       &metaStruct{Finished: tensor.Scalar(false), LeftContextSize: 0},
		KVMetadata: map[string]any{"binary_handle": []byte{0, 0xff, 0x10}},
	}
	if d := mustPut(t, sender, "0", "1", "typed", p); d.HostRing == nil {
		t.Fatalf("typed payload took %v", d)
	}
	m := mustGet(t, receiver, "0", "1", "typed", nil).(map[string]any)
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
	for _, ringBytes := range []int{4096, 0} {
		sender, receiver := openEdge(t, ringBytes)
		vals := make([]int64, 56)
		for i := range vals {
			vals[i] = int64(i)
		}
		src, _ := tensor.FromSlice(vals)
		mustPut(t, sender, "0", "1", "source-reuse", src)
		for i := range vals {
			vals[i] = -1
		}
		got := int64s(t, mustGet(t, receiver, "0", "1", "source-reuse", nil))
		if got[0] != 0 || got[55] != 55 {
			t.Fatalf("ring=%d: got %v", ringBytes, got)
		}
	}
}

func TestMixedArrayImageAndTensor(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	arr := &tensor.Array{DType: "<i4", Shape: []int{4, 3}, Data: make([]byte, 48)}
	for i := range 12 {
		arr.Data[i*4] = byte(i * 2)
	}
	img := &tensor.Image{Mode: "RGB", Shape: []int{2, 3, 3}, Data: make([]byte, 18)}
	for i := range img.Data {
		img.Data[i] = byte(i)
	}
	wantArr, wantImg := append([]byte(nil), arr.Data...), append([]byte(nil), img.Data...)
	payload := map[string]any{"codes": codes(28, 0)["codes"], "array": arr, "image": img, "slice": []any{1, 7, 2}}
	d := mustPut(t, sender, "0", "1", "mixed-native", payload)
	if d.HostRing == nil {
		t.Fatalf("mixed payload took %v", d)
	}
	m := mustGet(t, receiver, "0", "1", "mixed-native", &d).(map[string]any)
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

func TestFallbackMissWhileLockHeldThenClaim(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	key := shmtest.Key("fallback-claim")
	big := codes(4096, 0)["codes"]
	d := mustPut(t, sender, "0", "1", key, big)
	if d.Shm == nil {
		t.Fatalf("a 32 KiB tensor took %v on a 4 KiB ring", d)
	}
	holder := shmtest.HoldLock(t, "/dev/shm/shm_"+key+"_lockfile.lock")
	missing(t, receiver, "0", "1", key, nil)
	holder.Release(t)
	if got := int64s(t, mustGet(t, receiver, "0", "1", key, nil)); got[4095] != 4095 {
		t.Fatalf("got %v", got[4095])
	}
	missing(t, receiver, "0", "1", key, &d)
	if _, err := os.Stat("/dev/shm/shm_" + key + "_lockfile.lock"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file left behind: %v", err)
	}
}

func TestLargeTensorDoesNotShareOwnerWithSmallMetadata(t *testing.T) {
	c := open(t, shmtest.Scope(t), "0", ring.DefaultCapacity)
	ones := make([]float32, 16384)
	for i := range ones {
		ones[i] = 1
	}
	hidden, _ := tensor.FromSlice(ones)
	mustPut(t, c, "0", "1", "large-owner", map[string]any{"hidden": hidden, "finished": tensor.Scalar(false)})
	m := mustGet(t, c, "0", "1", "large-owner", nil).(map[string]any)
	if f := m["finished"].(*tensor.Tensor); cap(f.Data) != 1 {
		t.Fatalf("finished keeps %d bytes alive", cap(f.Data))
	}
	if h := m["hidden"].(*tensor.Tensor); cap(h.Data) != 65536 {
		t.Fatalf("hidden holds %d bytes", cap(h.Data))
	}
}

func TestFullRingAndLargeFrameUseExistingShm(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	ring, shm := 0, 0
	for i := range 12 {
		d := mustPut(t, sender, "0", "1", "full"+itoa(i), codes(56, 0))
		if d.HostRing != nil {
			ring++
		} else {
			shm++
		}
	}
	if ring == 0 || shm == 0 {
		t.Fatalf("ring=%d shm=%d: want both paths used", ring, shm)
	}
	for i := 11; i >= 0; i-- {
		got := int64s(t, mustGet(t, receiver, "0", "1", "full"+itoa(i), nil).(map[string]any)["codes"])
		if got[55] != 55 {
			t.Fatalf("full%d: %v", i, got)
		}
	}
	d := mustPut(t, sender, "0", "1", "large", codes(4096, 0)["codes"])
	if d.Shm == nil {
		t.Fatalf("large took %v", d)
	}
	if got := int64s(t, mustGet(t, receiver, "0", "1", "large", &d)); got[4095] != 4095 {
		t.Fatal("large differs")
	}
	if d := mustPut(t, sender, "0", "1", "recovered", codes(56, 0)); d.HostRing == nil {
		t.Fatalf("ring did not recover: %v", d)
	}
	mustGet(t, receiver, "0", "1", "recovered", nil)
	h := sender.Health()
	if h.Puts != 14 || h.HostRingPuts != uint64(ring+1) || h.HostRingFallbacks != uint64(shm+1) {
		t.Fatalf("health %+v", h)
	}
}

func TestReputAcrossRingAndFallbackAndStaleDescriptor(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	key := shmtest.Key("reuse")
	one := func(v int64) *tensor.Tensor { t, _ := tensor.FromSlice([]int64{v}); return t }
	full := func(v int64) *tensor.Tensor {
		vals := make([]int64, 4096)
		for i := range vals {
			vals[i] = v
		}
		t, _ := tensor.FromSlice(vals)
		return t
	}
	old := mustPut(t, sender, "0", "1", key, one(11))
	current := mustPut(t, sender, "0", "1", key, one(22))
	missing(t, receiver, "0", "1", key, &old)
	if got := int64s(t, mustGet(t, receiver, "0", "1", key, &current)); got[0] != 22 {
		t.Fatalf("got %v", got)
	}
	mustPut(t, sender, "0", "1", key, one(33))
	mustPut(t, sender, "0", "1", key, full(44))
	if got := int64s(t, mustGet(t, receiver, "0", "1", key, nil)); got[0] != 44 {
		t.Fatalf("got %v, want the per-key version 44", got[0])
	}
	mustPut(t, sender, "0", "1", key, full(55))
	mustPut(t, sender, "0", "1", key, one(66))
	if got := int64s(t, mustGet(t, receiver, "0", "1", key, nil)); len(got) != 1 || got[0] != 66 {
		t.Fatalf("got %v, want the ring version 66", got)
	}
	if _, err := os.Stat("/dev/shm/" + key); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("replaced segment left behind: %v", err)
	}
	missing(t, receiver, "0", "1", key, nil)
}

func TestCancelWithoutReceiverAndExactPrefix(t *testing.T) {
	for _, ringBytes := range []int{4096, 0} {
		sender, receiver := openEdge(t, ringBytes)
		p := shmtest.Key("req") + "_0_"
		other := shmtest.Key("request") + "_0_0"
		for _, key := range []string{p + "0", p + "1", p + "10other", other} {
			mustPut(t, sender, "0", "1", key, codes(56, 0))
		}
		if n := sender.CleanupPrefix(p); n != 2 {
			t.Fatalf("ring=%d: cleanup-prefix retired %d, want 2", ringBytes, n)
		}
		missing(t, receiver, "0", "1", p+"0", nil)
		missing(t, receiver, "0", "1", p+"1", nil)
		mustGet(t, receiver, "0", "1", p+"10other", nil)
		mustGet(t, receiver, "0", "1", other, nil)
		for _, key := range []string{p + "0", p + "1"} {
			if _, err := os.Stat("/dev/shm/" + key); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s left behind", key)
			}
		}
		if d := mustPut(t, sender, "0", "1", "next", codes(56, 0)); ringBytes > 0 && d.HostRing == nil {
			t.Fatalf("ring credit not returned: %v", d)
		}
		if !sender.Cleanup("next") || sender.Cleanup("next") {
			t.Fatal("cleanup must report exactly one retirement")
		}
		missing(t, receiver, "0", "1", "next", nil)
	}
}

func TestDisabledRingAndFalsePayload(t *testing.T) {
	s := shmtest.Scope(t)
	legacy := open(t, s, "0", 0)
	receiver := open(t, s, "1", 4096)
	d := mustPut(t, legacy, "0", "1", shmtest.Key("legacy"), codes(3, 0))
	if d.Shm == nil {
		t.Fatalf("disabled ring used %v", d)
	}
	if got := int64s(t, mustGet(t, receiver, "0", "1", d.Shm.Name, &d).(map[string]any)["codes"]); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("got %v", got)
	}
	sender := open(t, s, "0", 4096)
	if d := mustPut(t, sender, "0", "1", "falsey", false); d.HostRing == nil {
		t.Fatalf("false took %v", d)
	}
	if v := mustGet(t, receiver, "0", "1", "falsey", nil); v != false {
		t.Fatalf("got %#v", v)
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
	c := open(t, shmtest.Scope(t), "0", ring.DefaultCapacity)
	mustPut(t, c, "0", "1", "native-lists", payload)
	m := mustGet(t, c, "0", "1", "native-lists", nil).(map[string]any)
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
	c := open(t, shmtest.Scope(t), "0", ring.DefaultCapacity)
	d := mustPut(t, c, "0", "1", "mixed-lists", map[string]any{"condition": cond, "codes": codes(28, 0)["codes"], "extension": literal})
	if d.HostRing == nil {
		t.Fatalf("took %v", d)
	}
	m := mustGet(t, c, "0", "1", "mixed-lists", nil).(map[string]any)
	if e, ok := m["extension"].(wire.Ext); !ok || e.Code != 42 || string(e.Data) != string(literal.Data) {
		t.Fatalf("extension = %#v", m["extension"])
	}
	if got := int64s(t, m["codes"]); got[27] != 27 {
		t.Fatal("codes differ")
	}
	if l := m["condition"].([]any); len(l) != 8192 || l[0] != 0.25 {
		t.Fatal("condition differs")
	}
}

func TestCloseIsIdempotentAndRemovesOwnedRing(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	d := mustPut(t, sender, "0", "1", "close", codes(3, 0))
	mustGet(t, receiver, "0", "1", "close", nil)
	pending := shmtest.Key("pending")
	mustPut(t, sender, "0", "1", pending, codes(4096, 0))
	if fifos, _ := filepath.Glob(receiver.Names().WakeDir + "/1_*"); len(fifos) != 1 {
		t.Fatalf("receiver FIFOs %v, want one", fifos)
	}
	for range 2 {
		if err := sender.Close(); err != nil {
			t.Fatal(err)
		}
		if err := receiver.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/dev/shm/" + d.HostRing.Name, "/dev/shm/" + pending, "/dev/shm/shm_" + pending + "_lockfile.lock", sender.Names().RingDir()} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s survives close: %v", p, err)
		}
	}
	if fifos, _ := filepath.Glob(receiver.Names().WakeDir + "/1_*"); len(fifos) != 0 {
		t.Fatalf("the receiver's FIFO survives close: %v", fifos)
	}
	if _, _, err := sender.Put("0", "1", "after", codes(3, 0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
}

func TestBadKeysAreRefusedBeforeTouchingFiles(t *testing.T) {
	c := open(t, shmtest.Scope(t), "0", 0)
	for _, key := range []string{"", "a/b", "../etc/passwd", ".", "..", "nul\x00byte", strings.Repeat("k", 256)} {
		if _, _, err := c.Put("0", "1", key, codes(3, 0)); err == nil {
			t.Errorf("put accepted key %q", key)
		}
		if _, _, _, err := c.Get("0", "1", key, nil); err == nil {
			t.Errorf("get accepted key %q", key)
		}
	}
}

func TestGetWithPastDeadlineMisses(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	mustPut(t, sender, "0", "1", "late", codes(3, 0))
	if _, _, ok, err := receiver.GetWithDeadline("0", "1", "late", nil, time.Now().Add(-time.Second)); ok || err != nil {
		t.Fatalf("past deadline: ok=%v err=%v", ok, err)
	}
	if _, _, ok, _ := receiver.GetWithDeadline("0", "1", "late", nil, time.Now().Add(time.Minute)); !ok {
		t.Fatal("the publication was lost by the missed deadline")
	}
}

func TestGetContextMissesOnceDone(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	mustPut(t, sender, "0", "1", "ctx", codes(3, 0))
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, ok, err := receiver.GetContext(done, "0", "1", "ctx", nil); ok || err != nil {
		t.Fatalf("done ctx: ok=%v err=%v", ok, err)
	}
	if _, _, ok, _ := receiver.GetContext(context.Background(), "0", "1", "ctx", nil); !ok {
		t.Fatal("the publication was lost by the cancelled get")
	}
}

func TestDescriptorMapForm(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	d := mustPut(t, sender, "0", "1", "mapped", codes(3, 7))
	wrapped := `{"mapped": ` + d.String() + `}`
	pd, err := descriptor.Parse([]byte(wrapped), "mapped")
	if err != nil || pd.HostRing == nil || pd.HostRing.Position != d.HostRing.Position {
		t.Fatalf("parse %s: %+v %v", wrapped, pd, err)
	}
	if got := int64s(t, mustGet(t, receiver, "0", "1", "mapped", pd).(map[string]any)["codes"]); got[0] != 7 {
		t.Fatal("wrong value")
	}
}

func TestScopeNamesAreSharedAcrossConnectors(t *testing.T) {
	s := shmtest.Scope(t)
	a, b := open(t, s, "0", 4096), open(t, s, "1", 4096)
	if a.Names() != b.Names() || a.Names() != scope.New(s) {
		t.Fatal("one scope, two names")
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

// A tensor tree whose frame is too large for the ring but whose plain form
// fits goes through the ring as kind-0 bytes, as the seed does (SPEC §9).
func TestPlainFormTakesTheRingWhenTheFrameDoesNotFit(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	key := "plain-fits"
	limit := sender.ring.MaxPayload(key)
	var payload map[string]any
	for n := 1; n < 256 && payload == nil; n++ {
		p := codes(n, 0)
		_, ferr := frame.Prepare(p, limit)
		plain, _ := wire.Marshal(p)
		if errors.Is(ferr, frame.ErrTooLarge) && len(plain) <= limit {
			payload = p
		}
	}
	if payload == nil {
		t.Fatal("no tensor size between the frame limit and the plain limit")
	}
	d := mustPut(t, sender, "0", "1", key, payload)
	if d.HostRing == nil {
		t.Fatalf("took %v, want the ring", d)
	}
	got := int64s(t, mustGet(t, receiver, "0", "1", key, &d).(map[string]any)["codes"])
	want := int64s(t, payload["codes"])
	if !slices.Equal(got, want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
}

// A ring descriptor reads only its publication (SPEC §9): once a per-key
// put has replaced it, the descriptor misses even though a segment of the
// key is there, and a get without a descriptor takes the segment.
func TestRingDescriptorNeverFallsBackToTheSegment(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	key := shmtest.Key("only-ring")
	small := mustPut(t, sender, "0", "1", key, codes(3, 1))
	if small.HostRing == nil {
		t.Fatalf("took %v", small)
	}
	if d := mustPut(t, sender, "0", "1", key, codes(4096, 2)); d.Shm == nil {
		t.Fatalf("took %v", d)
	}
	missing(t, receiver, "0", "1", key, &small)
	if _, err := os.Stat("/dev/shm/" + key); err != nil {
		t.Fatalf("the descriptor's miss touched the segment: %v", err)
	}
	if got := int64s(t, mustGet(t, receiver, "0", "1", key, nil).(map[string]any)["codes"]); got[0] != 2 {
		t.Fatalf("got %v", got[0])
	}
}

// Health counts both paths on both ends (SPEC §9): puts, gets, bytes and
// the ring's share.
func TestHealthCountsBothPaths(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	small, big := shmtest.Key("small"), shmtest.Key("big")
	n1, d1, err := sender.Put("0", "1", small, codes(3, 0))
	if err != nil || d1.HostRing == nil {
		t.Fatalf("put: %v %v", d1, err)
	}
	n2, d2, err := sender.Put("0", "1", big, codes(4096, 0))
	if err != nil || d2.Shm == nil {
		t.Fatalf("put: %v %v", d2, err)
	}
	mustGet(t, receiver, "0", "1", small, nil)
	mustGet(t, receiver, "0", "1", big, nil)
	missing(t, receiver, "0", "1", big, nil)
	want := Health{Puts: 2, BytesTransferred: uint64(n1 + n2), HostRingPuts: 1, HostRingFallbacks: 1}
	if h := sender.Health(); h != want {
		t.Fatalf("sender health %+v, want %+v", h, want)
	}
	if h := receiver.Health(); h != (Health{Gets: 2, HostRingGets: 1}) {
		t.Fatalf("receiver health %+v", h)
	}
}

// A tensor-free payload goes into the ring as its kind-0 bytes; one too
// large for the ring, or refused by a full ring, reaches the receiver
// through the per-key path with the same bytes.
func TestTensorFreePayloadOnBothPaths(t *testing.T) {
	sender, receiver := openEdge(t, 4096)
	ids := func(n int) []any {
		l := make([]any, n)
		for i := range l {
			l[i] = int64(i * 1000)
		}
		return l
	}
	for _, c := range []struct {
		n    int
		ring bool
	}{{10, true}, {2000, false}} {
		key := shmtest.Key("ids")
		d := mustPut(t, sender, "0", "1", key, map[string]any{"ids": ids(c.n)})
		if (d.HostRing != nil) != c.ring {
			t.Fatalf("%d ids took %v", c.n, d)
		}
		got := mustGet(t, receiver, "0", "1", key, &d).(map[string]any)["ids"].([]any)
		if len(got) != c.n || got[c.n-1] != int64((c.n-1)*1000) {
			t.Fatalf("%d ids: got %d, last %v", c.n, len(got), got[len(got)-1])
		}
	}
	// Fill the ring with unclaimed frames: the next small payload falls back.
	var refused *Descriptor
	for i := 0; i < 64 && refused == nil; i++ {
		d := mustPut(t, sender, "0", "1", shmtest.Key("fill"), map[string]any{"ids": ids(100)})
		if d.Shm != nil {
			refused = &d
		}
	}
	if refused == nil {
		t.Fatal("the ring never filled")
	}
	got := mustGet(t, receiver, "0", "1", refused.Shm.Name, refused).(map[string]any)["ids"].([]any)
	if len(got) != 100 || got[99] != int64(99000) {
		t.Fatalf("fallback payload: %d ids", len(got))
	}
}
