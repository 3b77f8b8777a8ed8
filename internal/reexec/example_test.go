//go:build linux

package reexec_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"omnishm/internal/reexec"
)

// A role registers itself from an init function, so the child, which runs
// this same binary, takes it before main (or TestMain) starts.
func init() {
	reexec.Register("example-upper", func(ctx context.Context, args []string) int {
		reexec.WriteLine("ready")
		for {
			line, err := reexec.ReadLine()
			if err != nil {
				return 0 // the parent closed our stdin: done
			}
			reexec.WriteLine(strings.ToUpper(line))
		}
	})
}

func Example() {
	child, err := reexec.Start("example-upper", reexec.Options{Ready: "ready"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer child.Stop(10 * time.Second) // a no-op once it has exited
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	child.Send("hello")
	line, err := child.Line(ctx)
	fmt.Println(line, err)
	child.CloseInput()
	fmt.Println("exit:", child.Wait(ctx))
	// Output:
	// HELLO <nil>
	// exit: <nil>
}
