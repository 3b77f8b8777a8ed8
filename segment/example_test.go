//go:build linux

package segment_test

import (
	"fmt"
	"os"
	"time"

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

// A producer learns that its publication was taken without taking a lock.
func ExampleProducer_Claimed() {
	key := fmt.Sprintf("example_claimed_%d", os.Getpid())
	producer := segment.NewProducer(segment.Options{})
	defer producer.Close()

	d, err := producer.Put(key, []byte("payload"))
	if err != nil {
		fmt.Println(err)
		return
	}
	claimed, _ := producer.Claimed(d)
	fmt.Println("before:", claimed)
	segment.Claim("", key) // a receiver, in any process
	claimed, _ = producer.Claimed(d)
	fmt.Println("after:", claimed)
	// Output:
	// before: false
	// after: true
}

// A dry run reports the orphan lock files a crashed peer left, without
// removing them.
func ExampleSweep() {
	dir, _ := os.MkdirTemp("", "shm")
	defer os.RemoveAll(dir)
	// A lock file whose segment is gone, last changed two minutes ago.
	lock := dir + "/shm_req_1_lockfile.lock"
	os.WriteFile(lock, nil, 0o600)
	old := time.Now().Add(-2 * time.Minute)
	os.Chtimes(lock, old, old)

	rep, err := segment.Sweep(segment.SweepOptions{ListOptions: segment.ListOptions{Dir: dir}, DryRun: true})
	for _, s := range rep.Removed {
		fmt.Println(s.What, s.Key, s.Reason)
	}
	fmt.Println(err)
	// Output:
	// lock req_1 orphan: segment gone
	// <nil>
}

// A receiver that names the key it is claiming to a crash watchdog, for
// the moment between unlinking the segment and its lock file.
func ExampleClaimer() {
	key := fmt.Sprintf("example_claimer_%d", os.Getpid())
	producer := segment.NewProducer(segment.Options{})
	defer producer.Close()
	if _, err := producer.Put(key, []byte("payload")); err != nil {
		fmt.Println(err)
		return
	}
	c := segment.Claimer{
		WillRemove: func(path string) { fmt.Println("claiming", path == segment.DefaultDir+"/"+key) },
		OnRemove:   func(string) { fmt.Println("claimed") },
	}
	data, ok, err := c.Claim(key)
	fmt.Println(string(data), ok, err)
	// Output:
	// claiming true
	// claimed
	// payload true <nil>
}
