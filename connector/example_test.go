package connector_test

import (
	"fmt"
	"log"

	"omnishm/connector"
	"omnishm/tensor"
)

// Two stages of one deployment exchange a tensor tree through the host ring.
func Example() {
	opts := connector.DefaultOptions()
	opts.WakeupScope = "example-deployment"

	opts.StageID = "0"
	producer, err := connector.Open(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	opts.StageID = "1"
	consumer, err := connector.Open(opts)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()

	codes, _ := tensor.FromSlice([]int64{1, 2, 3})
	_, desc, err := producer.Put("0", "1", "req-1_0_0", map[string]any{"codes": codes})
	if err != nil {
		log.Fatal(err)
	}
	payload, _, ok, err := consumer.Get("0", "1", "req-1_0_0", &desc)
	if err != nil || !ok {
		log.Fatal(ok, err)
	}
	got, _ := tensor.Values[int64](payload.(map[string]any)["codes"].(*tensor.Tensor))
	fmt.Println(desc.HostRing != nil, got)
	// Output: true [1 2 3]
}
