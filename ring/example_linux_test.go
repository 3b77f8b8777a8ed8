package ring_test

import (
	"fmt"
	"os"

	"omnishm/ring"
	"omnishm/scope"
)

// A producer publishes a payload on edge 0->1; a receiver in another
// Transport (normally another process) claims it exactly once.
func Example() {
	names := scope.New(fmt.Sprintf("example-%d", os.Getpid()))
	producer, err := ring.New(ring.Options{Names: names, Capacity: 4096})
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	receiver, _ := ring.New(ring.Options{Names: names, Capacity: 4096})
	defer receiver.Close()

	payload := []byte("\xa5hello") // msgpack "hello"
	desc, ok, err := producer.Put("0", "1", "req_0_0", ring.KindBytes, len(payload),
		func(dst []byte) error { copy(dst, payload); return nil })
	fmt.Println(ok, err, desc.Position, desc.Size)

	copyOut := func(kind ring.Kind, b []byte) (any, error) { return string(b), nil }
	v, size, ok, err := receiver.Get("0", "1", "req_0_0", nil, copyOut)
	fmt.Printf("%q %d %v %v\n", v, size, ok, err)
	_, _, ok, _ = receiver.Get("0", "1", "req_0_0", &desc, copyOut)
	fmt.Println("again:", ok)
	// Output:
	// true <nil> 0 6
	// "\xa5hello" 6 true <nil>
	// again: false
}

// A producer learns that its publication was claimed, without a lock and
// from any process that has its descriptor.
func ExampleClaimed() {
	names := scope.New(fmt.Sprintf("example-claimed-%d", os.Getpid()))
	producer, _ := ring.New(ring.Options{Names: names, Capacity: 4096})
	defer producer.Close()
	receiver, _ := ring.New(ring.Options{Names: names, Capacity: 4096})
	defer receiver.Close()

	desc, _, _ := producer.Put("0", "1", "req_0_1", ring.KindBytes, 1,
		func(dst []byte) error { dst[0] = 0xc0; return nil }) // msgpack nil
	claimed, err := ring.Claimed(desc)
	fmt.Println(claimed, err)
	receiver.Get("0", "1", "req_0_1", nil, func(ring.Kind, []byte) (any, error) { return nil, nil })
	claimed, err = ring.Claimed(desc)
	fmt.Println(claimed, err)
	// Output:
	// false <nil>
	// true <nil>
}
