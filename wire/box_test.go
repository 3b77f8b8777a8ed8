package wire_test

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

// Decoded numbers of a list live in a slab the list's interfaces point into
// (box.go). They must survive collections that run while nothing but those
// interfaces refers to the slab, with the heap reused in between.
func TestListNumbersSurviveGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(1))
	const n = 1 << 15
	ints, floats := make([]int64, n), make([]float64, n)
	intList, floatList := make([]any, n), make([]any, n) // lists: typed slices travel as tensors
	for i := range n {
		ints[i] = int64(i)*7919 - n*1000 // negative and above 255: slab-boxed
		floats[i] = float64(i) + 0.5
		intList[i], floatList[i] = ints[i], floats[i]
	}
	in := mustMarshal(t, map[string]any{"ints": intList, "floats": floatList})
	v := mustUnmarshal(t, in)
	m := v.(map[string]any)
	gotInts, gotFloats := m["ints"].([]any), m["floats"].([]any)
	clear(in)
	m, v = nil, nil
	var garbage [][]int64
	for range 5 {
		runtime.GC()
		// Freed memory handed out again must not be what the lists read.
		garbage = append(garbage[:0], make([]int64, n), make([]int64, n))
		for _, g := range garbage {
			for i := range g {
				g[i] = math.MinInt64
			}
		}
	}
	for i := range n {
		if x, ok := gotInts[i].(int64); !ok || x != ints[i] {
			t.Fatalf("ints[%d] = %v, want %d", i, gotInts[i], ints[i])
		}
		if f, ok := gotFloats[i].(float64); !ok || f != floats[i] {
			t.Fatalf("floats[%d] = %v, want %v", i, gotFloats[i], floats[i])
		}
	}
	runtime.KeepAlive(garbage)
}
