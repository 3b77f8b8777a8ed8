//go:build linux

package connector_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/tensor"
)

// Two stages of one deployment exchange payloads through the host ring.
// The zero Options are the defaults; each stage names itself and the
// deployment's scope.
func Example() {
	scope := fmt.Sprintf("example-%d", os.Getpid())
	producer, err := connector.Open(connector.Options{StageID: "0", WakeupScope: scope})
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	consumer, err := connector.Open(connector.Options{StageID: "1", WakeupScope: scope})
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()

	// Put copies the payload: the source is the caller's again at once.
	codes, _ := tensor.FromSlice([]int64{1, 2, 3})
	_, desc, err := producer.Put("0", "1", "req-1_0_0", map[string]any{"codes": codes})
	if err != nil {
		log.Fatal(err)
	}
	codes.Data[0] = 99
	// Get claims that publication, or misses; the payload is the caller's.
	payload, _, ok, err := consumer.Get("0", "1", "req-1_0_0", &desc)
	if err != nil || !ok {
		log.Fatal(ok, err)
	}
	got, _ := tensor.Values[int64](payload.(map[string]any)["codes"].(*tensor.Tensor))
	fmt.Println(desc.HostRing != nil, got)

	// Recv blocks until a put wakes it (or ctx ends).
	go func() {
		if _, _, err := producer.Put("0", "1", "greeting", map[string]any{"text": "hello"}); err != nil {
			log.Print(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	payload, _, err = consumer.Recv(ctx, "0", "greeting")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(payload.(map[string]any)["text"])
	// Output:
	// true [1 2 3]
	// hello
}

// A stage builds its connector from the deployment's configuration. New
// returns a Receiver: no type assertion is needed to Recv. host_ring_bytes
// 0 would mean per-key segments only.
func ExampleNew() {
	cfg, err := config.Parse([]byte(`
connectors:
  shm:
    name: SharedMemoryConnector
    extra:
      host_ring_bytes: 1048576
      wakeup_scope: example-config
      stage_id: 2
`))
	if err != nil {
		log.Fatal(err)
	}
	c, err := connector.New(cfg.Connectors["shm"])
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("receives as stage", c.Stage())
	// Output: receives as stage 2
}

// Malformed stage ids and keys are refused before anything is created.
func ExampleOpen_errors() {
	_, err := connector.Open(connector.Options{StageID: "talker"})
	fmt.Println(errors.Is(err, connector.ErrBadStage))

	c, err := connector.Open(connector.Options{HostRingBytes: connector.NoRing})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_, _, err = c.Put("0", "1", "../etc/passwd", "x")
	fmt.Println(errors.Is(err, connector.ErrBadKey))
	fmt.Println(err)
	// Output:
	// true
	// true
	// connector: put: bad key "../etc/passwd": contains '/'
}

// A Recv that times out says so with a RecvTimeoutError, which still
// matches context.DeadlineExceeded and names the scope and what the
// receiver saw on the edge (Saw) for a message that helps.
func ExampleRecvTimeoutError() {
	scope := fmt.Sprintf("example-timeout-%d", os.Getpid())
	c, err := connector.Open(connector.Options{StageID: "1", WakeupScope: scope})
	if err != nil {
		log.Fatal(err)
	}
	// The scope's wake directory outlives its receivers (prune removes it
	// once empty); the example removes its own, after Close.
	defer os.Remove(c.Names().WakeDir)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, _, err = c.Recv(ctx, "0", "req-1_0_0")
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	if te, ok := errors.AsType[*connector.RecvTimeoutError](err); ok {
		fmt.Println(te.Scope == scope, te.From, te.To, te.Key)
		fmt.Println(strings.HasPrefix(te.Saw(), "no producer ring on the edge"))
	}
	// Output:
	// true
	// true 0 1 req-1_0_0
	// true
}

// A producer learns what became of its publications: WaitClaimed returns
// once a receiver took one, and says so when the producer retired one
// instead. Shutdown would wait for every pending one before closing.
func ExampleSHM_WaitClaimed() {
	producer, consumer := openStages(fmt.Sprintf("claims-example-%d", os.Getpid()))
	defer producer.Close()
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, desc, err := producer.Put("0", "1", "req-1_0_0", map[string]any{"text": "hello"})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if _, _, err := consumer.Recv(ctx, "0", "req-1_0_0"); err != nil {
			log.Print(err)
		}
	}()
	fmt.Println("claimed:", producer.WaitClaimed(ctx, desc))

	_, desc, err = producer.Put("0", "1", "req-2_0_0", map[string]any{"text": "never read"})
	if err != nil {
		log.Fatal(err)
	}
	producer.Cleanup("req-2_0_0")
	err = producer.WaitClaimed(ctx, desc)
	fmt.Println(errors.Is(err, connector.ErrRetired))
	// Output:
	// claimed: <nil>
	// true
}

// A producer with several payloads of one edge ready puts them in one
// pass: the ring's lock is taken once for the frames it takes. Each
// Publication gets what its Put would have returned.
func ExampleSHM_PutMany() {
	producer, consumer := openStages(fmt.Sprintf("putmany-example-%d", os.Getpid()))
	defer producer.Close()
	defer consumer.Close()

	puts := []connector.Publication{
		{Key: "req-1_0_0", Payload: map[string]any{"text": "one"}},
		{Key: "req-1_0_1", Payload: map[string]any{"text": "two"}},
		{Key: "bad key/", Payload: map[string]any{"text": "never put"}},
		{Key: "req-1_0_2", Payload: map[string]any{"text": "not tried"}},
	}
	fmt.Println("tried:", producer.PutMany("0", "1", puts))
	for _, p := range puts[:3] {
		fmt.Println(p.Key, p.Descriptor.HostRing != nil, errors.Is(p.Err, connector.ErrBadKey))
	}
	v, _, _, _ := consumer.Get("0", "1", "req-1_0_1", nil)
	fmt.Println(v.(map[string]any)["text"])
	// Output:
	// tried: 3
	// req-1_0_0 true false
	// req-1_0_1 true false
	// bad key/ false true
	// two
}

// openStages opens stages 0 and 1 of one deployment scope, as Example does.
func openStages(scope string) (producer, consumer *connector.SHM) {
	producer, err := connector.Open(connector.Options{StageID: "0", WakeupScope: scope})
	if err != nil {
		log.Fatal(err)
	}
	consumer, err = connector.Open(connector.Options{StageID: "1", WakeupScope: scope})
	if err != nil {
		producer.Close()
		log.Fatal(err)
	}
	return producer, consumer
}
