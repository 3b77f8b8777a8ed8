package bench

import (
	"bytes"
	"os"
	"strconv"
)

// osThreads is this process's number of OS threads (the Threads line of
// /proc/self/status), 0 when it cannot be read.
func osThreads() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("Threads:")); ok {
			n, _ := strconv.Atoi(string(bytes.TrimSpace(v)))
			return n
		}
	}
	return 0
}
