package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/tensor"
)

func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{
		"producer": roleProducer,
		"receiver": roleReceiver,
		"recv":     roleRecv,
	})
}

// codes returns {"codes": int64[n]} with values start, start+1, ...
func codes(n int, start int64) map[string]any {
	vals := make([]int64, n)
	for i := range vals {
		vals[i] = start + int64(i)
	}
	t, _ := tensor.FromSlice(vals)
	return map[string]any{"codes": t}
}

func openEdge(t *testing.T, ringBytes int) (sender, receiver *SHM) {
	t.Helper()
	s := shmtest.Scope(t)
	return open(t, s, "0", ringBytes), open(t, s, "1", ringBytes)
}

func open(t *testing.T, scope, stage string, ringBytes int) *SHM {
	t.Helper()
	o := DefaultOptions()
	o.WakeupScope, o.StageID, o.HostRingBytes = scope, stage, ringBytes
	c, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func int64s(t *testing.T, v any) []int64 {
	t.Helper()
	tt, ok := v.(*tensor.Tensor)
	if !ok {
		t.Fatalf("want a tensor, got %T", v)
	}
	vals, err := tensor.Values[int64](tt)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

func mustGet(t *testing.T, c *SHM, from, to, key string, d *Descriptor) any {
	t.Helper()
	v, _, ok, err := c.Get(from, to, key, d)
	if err != nil || !ok {
		t.Fatalf("get %q: ok=%v err=%v", key, ok, err)
	}
	return v
}

func mustPut(t *testing.T, c *SHM, from, to, key string, v any) Descriptor {
	t.Helper()
	_, d, err := c.Put(from, to, key, v)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return d
}

func missing(t *testing.T, c *SHM, from, to, key string, d *Descriptor) {
	t.Helper()
	v, _, ok, err := c.Get(from, to, key, d)
	if err != nil || ok {
		t.Fatalf("get %q: want a miss, got ok=%v v=%v err=%v", key, ok, v, err)
	}
}

// Child roles. Arguments are positional; results are JSON lines on stdout.

// roleProducer: scope ringBytes key n start. Puts codes(n,start) under key
// on edge 0->1, prints the descriptor, then obeys "exit" (leave without
// closing), "close" (close, then exit) or "put KEY N START".
func roleProducer(args []string) int {
	ringBytes, _ := strconv.Atoi(args[1])
	o := DefaultOptions()
	o.WakeupScope, o.StageID, o.HostRingBytes = args[0], "0", ringBytes
	c, err := Open(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	put := func(key, n, start string) bool {
		nn, _ := strconv.Atoi(n)
		ss, _ := strconv.ParseInt(start, 10, 64)
		_, d, err := c.Put("0", "1", key, codes(nn, ss))
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
	o := DefaultOptions()
	o.WakeupScope, o.StageID = args[0], "1"
	c, err := Open(o)
	if err != nil {
		return 1
	}
	defer c.Close()
	var d *Descriptor
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

// roleRecv: scope key timeout. Blocks in Recv as stage 1 and prints the
// first value of the received codes, or the error.
func roleRecv(args []string) int {
	o := DefaultOptions()
	o.WakeupScope, o.StageID = args[0], "1"
	// Only a wakeup can end this Recv before its timeout: no polling.
	o.PollInterval = time.Hour
	c, err := Open(o)
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
