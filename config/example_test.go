package config_test

import (
	"fmt"

	"omnishm/config"
)

func Example() {
	cfg, err := config.Parse([]byte(`
connectors:
  shm:
    name: SharedMemoryConnector
    extra:
      host_ring_bytes: 4194304
      wakeup_scope: my-deployment
      stage_id: 1
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	shm := cfg.Connectors["shm"]
	fmt.Println(shm.Name, shm.Extra.HostRingBytes, shm.Extra.WakeupScope, shm.Extra.StageID)

	_, err = config.Parse([]byte(`
connectors:
  shm:
    name: SharedMemoryConnector
    extra: {host_ring_bytes: 100}
`))
	fmt.Println(err)
	// Output:
	// SharedMemoryConnector 4194304 my-deployment 1
	// config: line 5: connectors.shm.extra.host_ring_bytes: 100 is outside 0 or 4096..67108864
}

// A stage on another host reaches its peers through a NATS JetStream server.
func Example_nats() {
	cfg, err := config.Parse([]byte(`
connectors:
  remote:
    name: NatsConnector
    extra:
      url: nats://127.0.0.1:4222
      bucket: omnishm
      max_age: 10m
      timeout: 5s
      stage_id: 2
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	n := cfg.Connectors["remote"].Extra.Nats
	fmt.Println(n.URL, n.Bucket, n.MaxAge, n.Timeout, cfg.Connectors["remote"].Extra.StageID)

	_, err = config.Parse([]byte(`
connectors:
  remote:
    name: NatsConnector
    extra: {max_age: 10}
`))
	fmt.Println(err)
	// Output:
	// nats://127.0.0.1:4222 omnishm 10m0s 5s 2
	// config: line 5: connectors.remote.extra.max_age: must be a duration such as "10m" or "1.5s", got 10
}
