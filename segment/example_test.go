package segment_test

import (
	"fmt"
	"os"

	"omnishm/segment"
)

func Example() {
	key := fmt.Sprintf("example_%d", os.Getpid())
	producer := segment.NewProducer(segment.Options{})
	defer producer.Close()

	d, err := producer.Put(key, []byte("serialized payload"))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Any process may claim it; exactly one succeeds.
	data, ok, err := segment.Claim("", d.Name)
	fmt.Println(d.Size, ok, err, string(data))
	_, ok, _ = segment.Claim("", d.Name)
	fmt.Println("again:", ok)
	// Output:
	// 18 true <nil> serialized payload
	// again: false
}
