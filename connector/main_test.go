//go:build linux

package connector_test

import (
	"strconv"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
)

func TestMain(m *testing.M) {
	roles := conntest.ChildRoles(openChild)
	shmtest.Main(m, map[string]func([]string) int{
		"producer": roles.Put,  // scope ringBytes [key n start]
		"receiver": roles.Get,  // scope key [descriptor]
		"recv":     roles.Recv, // scope key timeout
		"sleeper":  roleSleeper,
		"pending":  rolePending,
		"flood":    roleFlood,

		"soakproducer":  roleSoakProducer,
		"soakreceiver":  roleSoakReceiver,
		"fanout":        roleFanoutProducer,
		"batchproducer": roleBatchProducer,
		"asnobody":      roleAsNobody,
	})
}

// Child roles. Arguments are positional; results are JSON lines on stdout.

// openChild opens a child's connector on the scope args[0]: as stage 0
// with HostRingBytes args[1], or as stage 1 that only a wakeup can end a
// Recv of before its timeout (no polling).
func openChild(stage connector.Stage, args []string) (connector.Receiver, []string, error) {
	if stage == "0" {
		ringBytes, _ := strconv.Atoi(args[1])
		c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: stage, HostRingBytes: ringBytes})
		return c, args[2:], err
	}
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: stage, PollInterval: time.Hour})
	return c, args[1:], err
}
