//go:build linux

package wake_test

import (
	"fmt"
	"time"

	"omnishm/scope"
	"omnishm/wake"
)

func Example() {
	dir := scope.New("example-wake-scope").WakeDir

	// Receiver of stage 1: note the generation before a get that misses.
	r, err := wake.OpenReceiver(dir, "1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	gen := r.Generation()

	// Producer: after each put to stage 1.
	n := wake.NewNotifier(dir)
	defer n.Close()
	n.Notify("1")

	// Receiver: wait for a put instead of polling.
	now, changed := r.WaitForChange(gen, 10*time.Second)
	fmt.Println(now-gen, changed)
	// Output: 1 true
}
