package proc_test

import (
	"fmt"

	"omnishm/proc"
)

// A ring records its creator's ID; a reader later asks whether that
// process still runs. Another start time means the pid was reused.
func ExampleCheck() {
	self, err := proc.Self()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(proc.Check(self))
	fmt.Println(proc.Check(proc.ID{PID: self.PID, Start: self.Start + 1}))
	// Output:
	// alive
	// dead
}
