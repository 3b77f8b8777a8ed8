//go:build linux

package connector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/tensor"
)

func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{
		"producer": roleProducer,
		"receiver": roleReceiver,
		"recv":     roleRecv,
		"sleeper":  roleSleeper,
		"pending":  rolePending,
		"flood":    roleFlood,

		"soakproducer": roleSoakProducer,
		"soakreceiver": roleSoakReceiver,
		"fanout":       roleFanoutProducer,
	})
}

// Child roles. Arguments are positional; results are JSON lines on stdout.

// roleProducer: scope ringBytes key n start. Puts conntest.Codes(n,start) under key
// on edge 0->1, prints the descriptor, then obeys "exit" (leave without
// closing), "close" (close, then exit) or "put KEY N START".
func roleProducer(args []string) int {
	ringBytes, _ := strconv.Atoi(args[1])
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "0", HostRingBytes: ringBytes})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	put := func(key, n, start string) bool {
		nn, _ := strconv.Atoi(n)
		ss, _ := strconv.ParseInt(start, 10, 64)
		_, d, err := c.Put("0", "1", key, conntest.Codes(nn, ss))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return false
		}
		shmtest.Say("%s", d.String())
		return true
	}
	if len(args) >= 5 && !put(args[2], args[3], args[4]) {
		return 1
	}
	for {
		var cmd, key, n, start string
		fmt.Sscan(shmtest.Hear(), &cmd, &key, &n, &start)
		switch cmd {
		case "put":
			if !put(key, n, start) {
				return 1
			}
		case "close":
			c.Close()
			shmtest.Say("closed")
			return 0
		default: // "exit" or the parent is gone
			os.Exit(0)
		}
	}
}

// roleReceiver: scope key [descriptor]. Gets key once on edge 0->1 and
// prints the values, or "miss".
func roleReceiver(args []string) int {
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "1"})
	if err != nil {
		return 1
	}
	defer c.Close()
	var d *connector.Descriptor
	if len(args) > 2 && args[2] != "" {
		if d, err = descriptor.Parse([]byte(args[2]), args[1]); err != nil {
			return 1
		}
	}
	shmtest.Say("ready")
	shmtest.Hear() // go
	v, _, ok, err := c.Get("0", "1", args[1], d)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !ok {
		shmtest.Say("miss")
		return 0
	}
	vals, _ := tensor.Values[int64](v.(map[string]any)["codes"].(*tensor.Tensor))
	b, _ := json.Marshal(vals)
	shmtest.Say("%s", b)
	return 0
}

// roleSleeper: scope prefix waiters messages. As stage 1 with no polling
// (only wakeups, and the dispatcher's own look before it sleeps, end a
// Recv), each of waiters goroutines receives keys prefix{g}_{j} for j <
// messages in order, checks the value g*messages+j and says "got g j" (or
// "error ..."), then "done".
func roleSleeper(args []string) int {
	c, err := openUnpolled(args[0])
	if err != nil {
		return 1
	}
	defer c.Close()
	waiters, _ := strconv.Atoi(args[2])
	messages, _ := strconv.Atoi(args[3])
	shmtest.Say("ready")
	var wg sync.WaitGroup
	for g := range waiters {
		wg.Go(func() {
			for j := range messages {
				v, _, err := c.Recv(context.Background(), "0", sleeperKey(args[1], g, j))
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

// openUnpolled opens stage 1 of scope with an hourly safety re-poll: in a
// test, only wakeups (and what the dispatcher finds itself) end a Recv.
func openUnpolled(scope string) (*connector.SHM, error) {
	return connector.Open(connector.Options{WakeupScope: scope, StageID: "1", PollInterval: time.Hour})
}

func sleeperKey(prefix string, g, j int) string {
	return prefix + strconv.Itoa(g) + "_" + strconv.Itoa(j)
}

// roleRecv: scope key timeout. Blocks in Recv as stage 1 and prints the
// first value of the received codes, or the error.
func roleRecv(args []string) int {
	// Only a wakeup can end this Recv before its timeout: no polling.
	c, err := openUnpolled(args[0])
	if err != nil {
		return 1
	}
	defer c.Close()
	timeout, _ := time.ParseDuration(args[2])
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	shmtest.Say("waiting")
	v, _, err := c.Recv(ctx, "0", args[1])
	if err != nil {
		shmtest.Say("error %v", err)
		return 0
	}
	vals, _ := tensor.Values[int64](v.(map[string]any)["codes"].(*tensor.Tensor))
	shmtest.Say("got %d", vals[0])
	return 0
}
