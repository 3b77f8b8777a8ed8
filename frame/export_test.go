package frame

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"

	"omnishm/wire"
)

// HeaderPathsAgree reads the header of frame b both ways: quick reports
// whether readHeaderQuick took it, and the error says how its result
// differs from readHeaderAny's.
func HeaderPathsAgree(b []byte) (quick bool, _ error) {
	header, data, err := split(b)
	if err != nil {
		return false, nil
	}
	qd, qs, qt, qn, ok := readHeaderQuick(header, len(data), nil, nil)
	if !ok {
		return false, nil
	}
	ad, as, at, an, err := readHeaderAny(wire.NewReader(header), len(data), nil, nil)
	switch {
	case err != nil:
		return true, fmt.Errorf("quick path took a header the full reader refuses: %v", err)
	case !slices.Equal(qd, ad) || !slices.Equal(qs, as):
		return true, fmt.Errorf("descriptors %v %v, full reader %v %v", qd, qs, ad, as)
	case !bytes.Equal(qt, at) || !bytes.Equal(qn, an) || cap(qt) != len(qt) || cap(qn) != len(qn):
		return true, fmt.Errorf("tree %x nonce %x, full reader %x %x", qt, qn, at, an)
	}
	return true, nil
}

var refsSink *refs

// RefsBytes is the heap bytes one decode spends on the refs of a frame of
// tensors tensors with dims dimensions in all: the least of three counts,
// as the count is the process's and anything else that allocates meanwhile
// (the runtime, now and then) adds to one.
func RefsBytes(tensors, dims int) uint64 {
	const n = 100
	least := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			refsSink = newRefs(tensors, dims)
		}
		runtime.ReadMemStats(&after)
		least = min(least, (after.TotalAlloc-before.TotalAlloc)/n)
	}
	refsSink = nil
	return least
}
