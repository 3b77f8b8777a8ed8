//go:build linux

package connector_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"omnishm/connector"
)

// A producer learns what became of its publications: WaitClaimed returns
// once a receiver took one, and says so when the producer retired one
// instead. Shutdown would wait for every pending one before closing.
func ExampleSHM_WaitClaimed() {
	scope := fmt.Sprintf("claims-example-%d", os.Getpid())
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
