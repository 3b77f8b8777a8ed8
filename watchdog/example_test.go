//go:build linux

package watchdog_test

import (
	"fmt"
	"os"

	"omnishm/internal/shmtest"
	"omnishm/watchdog"
)

func Example() {
	// A producer creates a shared-memory segment...
	path := "/dev/shm/" + shmtest.Key("example")
	if err := os.WriteFile(path, []byte("payload"), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	// ...and asks the process-wide watchdog to unlink it should this
	// process die before the segment is consumed or cleaned up.
	if err := watchdog.Default().Track(path); err != nil {
		fmt.Println("carrying on without a watchdog:", err)
	}

	// Normal cleanup: unlink it ourselves and forget it.
	os.Remove(path)
	watchdog.Default().Forget(path)
	fmt.Println("cleaned up")
	// Output: cleaned up
}

// A per-key producer names the segment before the key's lock file or the
// segment exists, and the file once it does, so a kill at any point of the
// put leaves neither behind.
func ExampleWatchdog_TrackSegment() {
	w := watchdog.Default()
	path := "/dev/shm/" + shmtest.Key("example-segment")
	if err := w.TrackSegment(path); err != nil {
		fmt.Println("carrying on without a watchdog:", err)
	}
	// ... create the lock file, lock it, create the segment ...
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		fmt.Println(err)
		return
	}
	w.Track(path)
	// ... write the payload, unlock. Once it is claimed or retired:
	os.Remove(path)
	w.Forget(path)
	fmt.Println("published and retired")
	// Output: published and retired
}
