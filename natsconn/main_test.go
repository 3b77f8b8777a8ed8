//go:build linux

package natsconn

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/shmtest"
)

type Descriptor = connector.Descriptor

func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{
		"put":   rolePut,
		"get":   roleGet,
		"claim": roleClaim,
		"recv":  roleRecv,
	})
}

// Child roles: the first two arguments are the server's URL and the
// bucket; results are lines on stdout.

func openChild(args []string, stage string) (*Connector, bool) {
	c, err := Open(Options{URL: args[0], Bucket: args[1], StageID: connector.Stage(stage), Timeout: wait})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, false
	}
	return c, true
}

// rolePut: url bucket key n start. Puts codes(n, start) under key on edge
// 0->1, prints the descriptor, then obeys "put KEY N START", "close" (close,
// then exit) or "exit" (leave without closing).
func rolePut(args []string) int {
	c, ok := openChild(args, "0")
	if !ok {
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
	if !put(args[2], args[3], args[4]) {
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
		default: // "exit", or the parent is gone
			os.Exit(0)
		}
	}
}

// roleGet: url bucket key [descriptor]. Gets key once on edge 0->1 after
// "go" and prints its codes as JSON, or "miss".
func roleGet(args []string) int {
	c, ok := openChild(args, "1")
	if !ok {
		return 1
	}
	defer c.Close()
	var d *Descriptor
	if len(args) > 3 && args[3] != "" {
		var err error
		if d, err = descriptor.Parse([]byte(args[3]), args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	shmtest.Say("ready")
	shmtest.Hear()
	v, _, ok, err := c.Get("0", "1", args[2], d)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	case !ok:
		shmtest.Say("miss")
		return 0
	}
	b, _ := json.Marshal(codesOf(v))
	shmtest.Say("%s", b)
	return 0
}

// roleClaim: url bucket prefix n. After "go", tries once to get each of
// prefix0 .. prefix{n-1} on edge 0->1 and prints {index: first code} of
// those it claimed.
func roleClaim(args []string) int {
	c, ok := openChild(args, "1")
	if !ok {
		return 1
	}
	defer c.Close()
	n, _ := strconv.Atoi(args[3])
	shmtest.Say("ready")
	shmtest.Hear()
	got := map[int]int64{}
	for i := range n {
		v, _, ok, err := c.Get("0", "1", args[2]+strconv.Itoa(i), nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if ok {
			got[i] = codesOf(v)[0]
		}
	}
	b, _ := json.Marshal(got)
	shmtest.Say("%s", b)
	return 0
}

// roleRecv: url bucket key timeout. Blocks in Recv as stage 1 and prints
// "got FIRST-CODE", or the error.
func roleRecv(args []string) int {
	c, ok := openChild(args, "1")
	if !ok {
		return 1
	}
	defer c.Close()
	timeout, _ := time.ParseDuration(args[3])
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	shmtest.Say("waiting")
	v, _, err := c.Recv(ctx, "0", args[2])
	if err != nil {
		shmtest.Say("error %v", err)
		return 0
	}
	shmtest.Say("got %d", codesOf(v)[0])
	return 0
}

// codesOf is values without a test to fail: a child reports what it got.
func codesOf(v any) []int64 {
	m, _ := v.(map[string]any)
	vals, err := valuesOf(m["codes"])
	if err != nil || len(vals) == 0 {
		return []int64{-1}
	}
	return vals
}
