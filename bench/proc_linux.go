package bench

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
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

// pinCPUs are the two CPUs a pinned run puts this process and the
// receiver on: the first two this process may run on.
func pinCPUs() ([2]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return [2]int{}, fmt.Errorf("pin: %w", err)
	}
	var cpus []int
	for i, w := range set {
		for ; w != 0; w &= w - 1 {
			cpus = append(cpus, i*bits.UintSize+bits.TrailingZeros(uint(w)))
		}
	}
	if len(cpus) < 2 {
		return [2]int{}, fmt.Errorf("%w: pin needs two CPUs, this process may run on %d", ErrPlan, len(cpus))
	}
	return [2]int{cpus[0], cpus[1]}, nil
}

// pinProcess makes every thread of process pid (0: this one) run on cpu
// alone, and returns what undoes it for this process's threads. A thread
// made later inherits the mask of the thread that made it, so the listing
// is repeated until a pass finds no thread it had not pinned.
func pinProcess(pid, cpu int) (undo func(), err error) {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/task"
	}
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		return nil, fmt.Errorf("pin: %w", err)
	}
	var set unix.CPUSet
	set.Set(cpu)
	pinned := map[int]bool{}
	for range 10 {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("pin: %w", err)
		}
		fresh := 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || pinned[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return nil, fmt.Errorf("pin thread %d to CPU %d: %w", tid, cpu, err)
			}
			pinned[tid], fresh = true, fresh+1
		}
		if fresh == 0 {
			break
		}
	}
	return func() {
		if tasks, err := os.ReadDir("/proc/self/task"); err == nil && pid == 0 {
			for _, t := range tasks {
				if tid, err := strconv.Atoi(t.Name()); err == nil {
					unix.SchedSetaffinity(tid, &before) // best effort: the run is over
				}
			}
		}
	}, nil
}
