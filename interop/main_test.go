//go:build linux

package interop

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"

	"omnishm/connector"
	"omnishm/frame"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/scope"
	"omnishm/tensor"
	"omnishm/wire"
)

func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{"goproducer": roleGoProducer})
}

// roleGoProducer: scope key... Puts tensorPayload(i) under the i-th key on
// edge 0->1 (ring path), prints each descriptor, then waits for a line (the
// test kills it instead). Wakeups are off: a killed child leaves no FIFO.
func roleGoProducer(args []string) int {
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "0", DisableWakeups: true})
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	for i, key := range args[1:] {
		_, d, err := c.Put("0", "1", key, tensorPayload(int64(i)))
		if err != nil {
			return shmtest.ChildFailed(err)
		}
		shmtest.Say("%s", d.String())
	}
	shmtest.Hear()
	c.Close()
	return 0
}

// tensorPayload is a tree with tensors of several dtypes and shapes next to
// native values; seed varies its contents. It travels as a tensor frame.
func tensorPayload(seed int64) map[string]any {
	codes := make([]int64, 56)
	for i := range codes {
		codes[i] = seed*1000 + int64(i)
	}
	hidden := []float32{0.5, -1.25, 3, float32(seed), 1e-3, -7.5}
	mask := []bool{true, false, true}
	half := []tensor.Half{tensor.HalfFrom(1.5), tensor.HalfFrom(-2)}
	return map[string]any{
		"codes":  must(tensor.FromSlice(codes)),
		"hidden": must(tensor.FromSlice(hidden, 2, 3)),
		"mask":   must(tensor.FromSlice(mask)),
		"half":   must(tensor.FromSlice(half, 2, 1)),
		"empty":  must(tensor.Zeros(tensor.Float32, 0, 4)),
		"meta": map[string]any{
			"request": fmt.Sprintf("req-%d", seed),
			"step":    seed,
			"scores":  []any{1.5, -2.25},
			"done":    false,
		},
	}
}

// plainPayload is a tensor-free tree (payload kind 0 on the ring) with a
// tensor in its marker-map form (SPEC §5) when withTensor is set.
func plainPayload(seed int64, withTensor bool) map[string]any {
	v := map[string]any{
		"text":  fmt.Sprintf("héllo %d ✓", seed),
		"ids":   []any{seed, int64(-1), int64(1) << 40},
		"raw":   []byte{0, 1, 2, 0xff},
		"ratio": 0.25,
		"none":  nil,
		"flags": map[string]any{"stream": true},
	}
	if withTensor {
		v["codes"] = must(tensor.FromSlice([]int32{int32(seed), 7, 8}))
	}
	return v
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// frameBytes is what a Go producer writes into the ring for v: a tensor frame.
func frameBytes(t *testing.T, v any) []byte {
	t.Helper()
	p, err := frame.Prepare(v, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Tensors() {
		t.Fatalf("payload %v has no tensors", v)
	}
	b := make([]byte, p.Size())
	if err := p.Write(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func plainBytes(t *testing.T, v any) []byte {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameTree compares decoded payload trees: tensors by dtype, shape and
// bytes; everything else with reflect.DeepEqual.
func sameTree(want, got any) bool {
	switch w := want.(type) {
	case *tensor.Tensor:
		g, ok := got.(*tensor.Tensor)
		return ok && w.Equal(g)
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok || !sameTree(wv, gv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !sameTree(w[i], g[i]) {
				return false
			}
		}
		return true
	case []byte:
		g, ok := got.([]byte)
		return ok && bytes.Equal(w, g)
	}
	return reflect.DeepEqual(want, got)
}

func checkTree(t *testing.T, what string, want, got any) {
	t.Helper()
	if !sameTree(want, got) {
		t.Fatalf("%s:\n got  %#v\n want %#v", what, got, want)
	}
}

// getEventually polls a Go Get until it claims key: a Python producer's new
// ring reaches a receiver that already scanned the edge through its
// directory watcher, a moment after the marker appears (SPEC §7).
func getEventually(t *testing.T, c *connector.SHM, key string, d *connector.Descriptor) (any, int) {
	t.Helper()
	var (
		v    any
		size int
	)
	shmtest.Eventually(t, wait, "Go get of "+key, func() bool {
		var ok bool
		var err error
		v, size, ok, err = c.Get("0", "1", key, d)
		if err != nil {
			t.Fatalf("get %q: %v", key, err)
		}
		return ok
	})
	return v, size
}

// missing asserts a miss of key on edge 0->1.
func missing(t *testing.T, c *connector.SHM, key string, d *connector.Descriptor) {
	t.Helper()
	conntest.Missing(t, c, "0", "1", key, d)
}

func waitAbsent(t *testing.T, what string, paths ...string) {
	t.Helper()
	shmtest.Eventually(t, wait, what, func() bool { return shmtest.Absent(paths...) })
}

// markers lists the marker files of scope s.
func markers(t *testing.T, s string) []string {
	t.Helper()
	entries, err := os.ReadDir(scope.New(s).RingDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
