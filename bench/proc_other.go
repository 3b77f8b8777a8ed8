//go:build !linux

package bench

import (
	"syscall"
	"time"
)

// cpuTime is the user and system CPU time of this process, every thread.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// osThreads is 0: there is no /proc/self/status to count them in.
func osThreads() int { return 0 }
