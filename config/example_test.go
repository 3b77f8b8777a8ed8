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
	fmt.Printf("%+v\n", cfg.Connectors["shm"])

	_, err = config.Parse([]byte(`
connectors:
  shm:
    name: SharedMemoryConnector
    extra: {host_ring_bytes: 100}
`))
	fmt.Println(err)
	// Output:
	// {Name:SharedMemoryConnector Extra:{HostRingBytes:4194304 WakeupScope:my-deployment StageID:1}}
	// config: line 5: connectors.shm.extra.host_ring_bytes: 100 is outside 0 or 4096..67108864
}
