package fswatch_test

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"omnishm/fswatch"
)

// A watch's epoch tells whether its directory changed since it was noted:
// one atomic load on the hot path, and Sync to apply what is queued now.
func Example() {
	dir, _ := os.MkdirTemp("", "fswatch")
	defer os.RemoveAll(dir)
	w, err := fswatch.New(true) // a background reader in the runtime poller
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	x, err := w.Add(dir, unix.IN_CREATE|unix.IN_DELETE|unix.IN_ONLYDIR)
	if err != nil {
		fmt.Println(err)
		return
	}
	noted := x.Epoch()
	fmt.Println("changed:", x.Epoch() != noted)

	os.WriteFile(filepath.Join(dir, "1_fifo"), nil, 0o600)
	w.Sync() // the background reader may not have got to it yet
	fmt.Println("changed:", x.Epoch() != noted, "lost:", x.Lost())

	os.RemoveAll(dir)
	w.Sync()
	fmt.Println("lost:", x.Lost())
	// Output:
	// changed: false
	// changed: true lost: false
	// lost: true
}
