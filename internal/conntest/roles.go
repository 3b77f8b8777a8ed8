//go:build linux

package conntest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/shmtest"
)

// Opener opens the transport of a test's re-executed child as stage, from
// the role's leading arguments (a scope, a server's URL, ...), and returns
// the arguments it did not use.
type Opener func(stage connector.Stage, args []string) (c connector.Receiver, rest []string, err error)

// Roles are the child roles every transport's tests share: the same
// protocol over each transport, so a cross-process test reads the same
// either way. Results are lines on stdout (shmtest.Say); each returns the
// child's exit code.
type Roles struct {
	// Put (stage 0; rest: [key n start]) puts Codes(n, start) under key on
	// edge 0->1 when given, printing the descriptor; then it obeys
	// "put KEY N START", "close" (close, then exit) or "exit" (leave
	// without closing, as a crash would).
	Put func(args []string) int
	// Get (stage 1; rest: key [descriptor]) says "ready", waits for a line,
	// gets key once on edge 0->1 (only the publication the descriptor
	// names, if one is given) and prints its codes as JSON, or "miss".
	Get func(args []string) int
	// Recv (stage 1; rest: key timeout) says "waiting", blocks in Recv for
	// key from stage 0 for at most timeout and prints "got FIRST-CODE", or
	// "error ERR".
	Recv func(args []string) int
}

// ChildRoles returns the shared roles over the transports open opens.
func ChildRoles(open Opener) Roles {
	return Roles{
		Put:  func(args []string) int { return withChild(open, "0", args, putRole) },
		Get:  func(args []string) int { return withChild(open, "1", args, getRole) },
		Recv: func(args []string) int { return withChild(open, "1", args, recvRole) },
	}
}

func withChild(open Opener, stage connector.Stage, args []string, role func(connector.Receiver, []string) int) int {
	c, rest, err := open(stage, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	return role(c, rest)
}

func putRole(c connector.Receiver, first []string) int {
	put := func(key, n, start string) bool {
		nn, _ := strconv.Atoi(n)
		ss, _ := strconv.ParseInt(start, 10, 64)
		_, d, err := c.Put("0", "1", key, Codes(nn, ss))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return false
		}
		shmtest.Say("%s", d.String())
		return true
	}
	if len(first) >= 3 && !put(first[0], first[1], first[2]) {
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

func getRole(c connector.Receiver, args []string) int {
	key := args[0]
	var d *connector.Descriptor
	if len(args) > 1 && args[1] != "" {
		var err error
		if d, err = descriptor.Parse([]byte(args[1]), key); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	shmtest.Say("ready")
	shmtest.Hear() // go
	v, _, ok, err := c.Get("0", "1", key, d)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	case !ok:
		shmtest.Say("miss")
		return 0
	}
	shmtest.Say("%s", codesLine(ChildCodes(v)))
	return 0
}

// CodesLine is the line Roles.Get prints for a payload of Codes(n, start).
func CodesLine(n int, start int64) string {
	return codesLine(ChildCodes(Codes(n, start)))
}

func codesLine(vals []int64) string {
	b, _ := json.Marshal(vals)
	return string(b)
}

func recvRole(c connector.Receiver, args []string) int {
	timeout, _ := time.ParseDuration(args[1])
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	shmtest.Say("waiting")
	v, _, err := c.Recv(ctx, "0", args[0])
	if err != nil {
		shmtest.Say("error %v", err)
		return 0
	}
	shmtest.Say("got %d", ChildCodes(v)[0])
	return 0
}
