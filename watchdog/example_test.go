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
