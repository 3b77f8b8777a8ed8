package descriptor_test

import (
	"fmt"

	"omnishm/descriptor"
)

// A descriptor travels as JSON, plain or keyed by the publication's key.
func ExampleParse() {
	d, err := descriptor.Parse([]byte(`{"req-1_0_0": {"host_ring": {"name": "omni_shm_ring_v1_0_x", "position": 4096, "size": 512}, "size": 512}}`), "req-1_0_0")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.HostRing.Position, d.Size)
	fmt.Println(d)
	// Output:
	// 4096 512
	// {"host_ring":{"name":"omni_shm_ring_v1_0_x","position":4096,"size":512},"size":512}
}
