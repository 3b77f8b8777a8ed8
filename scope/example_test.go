package scope_test

import (
	"fmt"
	"strings"

	"omnishm/scope"
)

// Both ends of an edge derive the same /dev/shm names from their scope.
func ExampleNew() {
	names := scope.New("my-deployment")
	fmt.Println(strings.HasPrefix(names.WakeDir, "/dev/shm/omni_shm_wake_"))
	fmt.Println(strings.HasPrefix(names.RingDirName, scope.RingDirPrefix))
	fmt.Println(strings.HasPrefix(names.EdgePrefix("0", "1"), names.RingPrefix()))
	fmt.Println(scope.Hash("my-deployment") == scope.Hash("my-deployment"), len(scope.Hash("x")))
	// Output:
	// true
	// true
	// true
	// true 24
}
