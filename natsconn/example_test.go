package natsconn_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"omnishm/natsconn"
	"omnishm/tensor"
)

// Two stages, which could run on two hosts, exchange a tensor tree through
// a NATS server (here one embedded in the example, JetStream in a temporary
// directory).
func Example() {
	dir, err := os.MkdirTemp("", "natsconn-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		log.Fatal("no server")
	}

	producer, err := natsconn.Open(natsconn.Options{URL: ns.ClientURL(), StageID: "0"})
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	consumer, err := natsconn.Open(natsconn.Options{URL: ns.ClientURL(), StageID: "1"})
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()

	codes, _ := tensor.FromSlice([]int64{1, 2, 3})
	_, desc, err := producer.Put("0", "1", "req-1_0_0", map[string]any{"codes": codes})
	if err != nil {
		log.Fatal(err)
	}
	// Recv sleeps on the consumer's watch until the publication is there.
	payload, _, err := consumer.Recv(context.Background(), "0", "req-1_0_0")
	if err != nil {
		log.Fatal(err)
	}
	got, _ := tensor.Values[int64](payload.(map[string]any)["codes"].(*tensor.Tensor))
	fmt.Println(desc.Nats.Bucket, desc.Nats.Key, got)
	// Output: omnishm 0.1.req-1_0_0 [1 2 3]
}
