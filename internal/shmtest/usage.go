//go:build linux

package shmtest

import (
	"os"
	"strconv"
	"strings"
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

// Syscalls is this process's read and write system call counts so far
// (/proc/self/io): what the wakeup benchmarks report per op. It skips the
// test where the kernel does not account them.
func Syscalls(tb testing.TB) (reads, writes int64) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		tb.Skip(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}
