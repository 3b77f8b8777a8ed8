//go:build linux

package natsconn

import (
	"encoding/json"
	"strconv"
	"testing"

	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
)

func TestCrossProcessPutAndGet(t *testing.T) {
	ts := startServer(t)
	b := bucket(t)
	// A child produces, the parent receives.
	p := shmtest.Start(t, "put", ts.url(), b, "xproc", "56", "100")
	d := conntest.ParseDescriptor(t, p.Line(t, wait), "xproc")
	if d.Nats == nil {
		t.Fatalf("descriptor %v: not a NATS publication", d)
	}
	receiver := openConn(t, ts.url(), b, "1")
	if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", "xproc", d)); len(got) != 56 || got[0] != 100 || got[55] != 155 {
		t.Fatalf("got %v", got)
	}
	conntest.Missing(t, receiver, "0", "1", "xproc", nil)
	// A publication outlives its producer's process only until Close.
	p.Send(t, "put left 3 7")
	p.Line(t, wait)
	p.Send(t, "close")
	p.Expect(t, wait, "closed")
	conntest.Missing(t, receiver, "0", "1", "left", nil)

	// The parent produces, a child receives with the descriptor.
	sender := openConn(t, ts.url(), b, "0")
	d2 := conntest.MustPut(t, sender, "0", "1", "xproc-back", codes(5, 7))
	r := shmtest.Start(t, "get", ts.url(), b, "xproc-back", d2.String())
	r.Line(t, wait)
	r.Send(t, "go")
	r.Expect(t, wait, "[7,8,9,10,11]")
	r.Exited(t, wait)
}

func TestCompetingReceiverProcessesClaimExactlyOnce(t *testing.T) {
	ts := startServer(t)
	sender, _ := edge(t, ts)
	const children, keys = 4, 60
	for i := range keys {
		conntest.MustPut(t, sender, "0", "1", "shared_"+strconv.Itoa(i), codes(1, int64(1000+i)))
	}
	var procs []*shmtest.Proc
	for range children {
		procs = append(procs, shmtest.Start(t, "claim", ts.url(), sender.opts.Bucket, "shared_", strconv.Itoa(keys)))
	}
	for _, p := range procs {
		p.Expect(t, wait, "ready")
	}
	// Every child tries every key, all at once.
	for _, p := range procs {
		p.Send(t, "go")
	}
	owner := map[int]int{}
	for c, p := range procs {
		var got map[int]int64
		if err := json.Unmarshal([]byte(p.Line(t, wait)), &got); err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if prev, dup := owner[i]; dup {
				t.Errorf("shared_%d claimed by children %d and %d", i, prev, c)
			}
			owner[i] = c
			if v != int64(1000+i) {
				t.Errorf("shared_%d: value %d", i, v)
			}
		}
		p.Exited(t, wait)
	}
	// The first child to try a key finds it: none is lost.
	if len(owner) != keys {
		t.Fatalf("%d of %d keys claimed", len(owner), keys)
	}
}

func TestRecvInAChildEndsWithAPut(t *testing.T) {
	ts := startServer(t)
	b := bucket(t)
	r := shmtest.Start(t, "recv", ts.url(), b, "wake", "60s")
	r.Expect(t, wait, "waiting")
	sender := openConn(t, ts.url(), b, "0")
	conntest.MustPut(t, sender, "0", "1", "wake", codes(3, 42))
	r.Expect(t, wait, "got 42")
	r.Exited(t, wait)
}
