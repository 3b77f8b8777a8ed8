//go:build race

// Package race says whether the race detector is built in, for tests that
// count allocations (under it sync.Pool drops some items on purpose, so
// reuse, and the allocations it saves, cannot be counted) and for a test
// whose third-party server races with itself under it.
package race

// Enabled is true in a -race build.
const Enabled = true
