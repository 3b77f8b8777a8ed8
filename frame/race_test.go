//go:build race

package frame_test

// raceEnabled: the race detector makes sync.Pool drop some items on
// purpose, so reuse cannot be counted.
const raceEnabled = true
