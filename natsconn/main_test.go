//go:build linux

package natsconn

import (
	"encoding/json"
	"strconv"
	"testing"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
)

type Descriptor = connector.Descriptor

func TestMain(m *testing.M) {
	roles := conntest.ChildRoles(openChild)
	shmtest.Main(m, map[string]func([]string) int{
		"put":   roles.Put,  // url bucket key n start
		"get":   roles.Get,  // url bucket key [descriptor]
		"recv":  roles.Recv, // url bucket key timeout
		"claim": roleClaim,
	})
}

// Child roles: the first two arguments are the server's URL and the
// bucket; results are lines on stdout.

func openChild(stage connector.Stage, args []string) (connector.Receiver, []string, error) {
	c, err := Open(Options{Nats: config.Nats{URL: args[0], Bucket: args[1], Timeout: wait}, StageID: stage})
	return c, args[2:], err
}

// roleClaim: url bucket prefix n. After "go", tries once to get each of
// prefix0 .. prefix{n-1} on edge 0->1 and prints {index: first code} of
// those it claimed.
func roleClaim(args []string) int {
	c, _, err := openChild("1", args)
	if err != nil {
		return shmtest.ChildFailed(err)
	}
	defer c.Close()
	n, _ := strconv.Atoi(args[3])
	shmtest.Say("ready")
	shmtest.Hear()
	got := map[int]int64{}
	for i := range n {
		v, _, ok, err := c.Get("0", "1", args[2]+strconv.Itoa(i), nil)
		if err != nil {
			return shmtest.ChildFailed(err)
		}
		if ok {
			got[i] = conntest.ChildCodes(v)[0]
		}
	}
	b, _ := json.Marshal(got)
	shmtest.Say("%s", b)
	return 0
}
