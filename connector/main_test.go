//go:build linux

package connector_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/tensor"
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

// roleSleeper: scope prefix waiters messages. As stage 1 with no polling
// (only wakeups, and the dispatcher's own look before it sleeps, end a
// Recv), each of waiters goroutines receives keys prefix{g}_{j} for j <
// messages in order, checks the value g*messages+j and says "got g j" (or
// "error ..."), then "done".
func roleSleeper(args []string) int {
	c, args, err := openChild("1", args)
	if err != nil {
		return 1
	}
	defer c.Close()
	waiters, _ := strconv.Atoi(args[1])
	messages, _ := strconv.Atoi(args[2])
	shmtest.Say("ready")
	var wg sync.WaitGroup
	for g := range waiters {
		wg.Go(func() {
			for j := range messages {
				v, _, err := c.Recv(context.Background(), "0", sleeperKey(args[0], g, j))
				if err != nil {
					shmtest.Say("error %v", err)
					return
				}
				vals, _ := tensor.Values[int64](v.(map[string]any)["codes"].(*tensor.Tensor))
				if want := int64(g*messages + j); len(vals) != 1 || vals[0] != want {
					shmtest.Say("error %d %d: got %v, want %d", g, j, vals, want)
					return
				}
				shmtest.Say("got %d %d", g, j)
			}
		})
	}
	wg.Wait()
	shmtest.Say("done")
	return 0
}

func sleeperKey(prefix string, g, j int) string {
	return prefix + strconv.Itoa(g) + "_" + strconv.Itoa(j)
}
