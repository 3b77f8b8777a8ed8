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

// A receiver that polls for a key checks the edge's producers between its
// tries (Vouch), so the try that finds the frame claims it without a
// liveness check of its own. A real loop vouches again every few
// microseconds, not on every try.
func ExampleTransport_Vouch() {
	names := scope.New(fmt.Sprintf("example-vouch-%d", os.Getpid()))
	producer, _ := ring.New(ring.Options{Names: names, Capacity: 4096})
	defer producer.Close()
	receiver, _ := ring.New(ring.Options{Names: names, Capacity: 4096})
	defer receiver.Close()

	decode := func(_ ring.Kind, b []byte) (any, error) { return string(b), nil }
	var v ring.Vouch
	for try := 0; try < 3; try++ {
		receiver.Vouch("0", "1", &v)
		got, ok, err := receiver.ReceiveVouched("0", "1", "req_0_2", decode, &v)
		if ok || err != nil {
			fmt.Printf("try %d: %q %v\n", try, got.Value, err)
			break
		}
		fmt.Printf("try %d: miss\n", try)
		payload := []byte("\xa3abc") // msgpack "abc"
		producer.Put("0", "1", "req_0_2", ring.KindBytes, len(payload),
			func(dst []byte) error { copy(dst, payload); return nil })
	}
	// Output:
	// try 0: miss
	// try 1: "\xa3abc" <nil>
}
