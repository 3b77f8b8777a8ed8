//go:build !linux

package bench

// osThreads is 0: there is no /proc/self/status to count them in.
func osThreads() int { return 0 }
