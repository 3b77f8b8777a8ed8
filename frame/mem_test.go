package frame_test

import "runtime"

// testingMem reads the bytes allocated so far by the whole process.
type testingMem struct{ bytes uint64 }

func (m *testingMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.bytes = s.TotalAlloc
}
