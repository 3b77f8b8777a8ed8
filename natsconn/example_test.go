//go:build linux

package natsconn_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"omnishm/config"
	"omnishm/natsconn"
	"omnishm/tensor"
)

// Two stages, which could run on two hosts, exchange a tensor tree through
// a NATS server (here one embedded in the example, JetStream in a temporary
// directory).
func Example() {
	url, stop, err := natsconn.StartEmbedded("")
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	producer, err := natsconn.Open(natsconn.Options{Nats: config.Nats{URL: url}, StageID: "0"})
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	consumer, err := natsconn.Open(natsconn.Options{Nats: config.Nats{URL: url}, StageID: "1"})
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

// A producer stays until a receiver has claimed its publication, as
// `omnishm send` does.
func ExampleConnector_WaitClaimed() {
	producer, consumer, stop := startEdge()
	defer stop()
	defer producer.Close()
	defer consumer.Close()

	_, desc, err := producer.Put("0", "1", "greeting", map[string]any{"text": "hello"})
	if err != nil {
		log.Fatal(err)
	}
	claimed := make(chan error, 1)
	go func() { claimed <- producer.WaitClaimed(context.Background(), desc) }()
	payload, _, err := consumer.Recv(context.Background(), "0", "greeting")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(payload.(map[string]any)["text"], <-claimed)

	// A publication its producer retires was never claimed.
	_, desc, _ = producer.Put("0", "1", "unwanted", map[string]any{})
	producer.Cleanup("unwanted")
	fmt.Println(errors.Is(producer.WaitClaimed(context.Background(), desc), natsconn.ErrRetired))
	// Output:
	// hello <nil>
	// true
}

// startEdge starts an embedded server and opens stages 0 and 1 on it, as
// Example does; stop stops the server.
func startEdge() (producer, consumer *natsconn.Connector, stop func()) {
	url, stop, err := natsconn.StartEmbedded("")
	if err != nil {
		log.Fatal(err)
	}
	if producer, err = natsconn.Open(natsconn.Options{Nats: config.Nats{URL: url}, StageID: "0"}); err != nil {
		stop()
		log.Fatal(err)
	}
	if consumer, err = natsconn.Open(natsconn.Options{Nats: config.Nats{URL: url}, StageID: "1"}); err != nil {
		producer.Close()
		stop()
		log.Fatal(err)
	}
	return producer, consumer, stop
}
