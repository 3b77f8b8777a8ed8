package keys_test

import (
	"fmt"

	"omnishm/keys"
)

func ExampleCheck() {
	fmt.Println(keys.Check("req_0_1"))
	fmt.Println(keys.Check("../etc/passwd"))
	// Output:
	// <nil>
	// bad key "../etc/passwd": contains '/'
}

func ExampleInPrefix() {
	for _, k := range []string{"req_0_12", "req_0_1x", "request_0_1"} {
		fmt.Println(k, keys.InPrefix("req_0_", k))
	}
	// Output:
	// req_0_12 true
	// req_0_1x false
	// request_0_1 false
}
