//go:build linux

package shmtest

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// CPUTime is this process's user+system CPU time so far: what the
// benchmarks of idle waiters and of per-message cost measure.
func CPUTime(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Threads is the number of OS threads of this process.
func Threads(tb testing.TB) int {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		tb.Fatal(err)
	}
	return len(entries)
}
