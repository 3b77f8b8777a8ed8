//go:build linux

package interop

import (
	"context"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/proc"
	"omnishm/ring"
)

// recvLater starts a Go RecvMessage of key on edge 0->1 and waits until
// the connector's dispatcher holds it (waiting counts the Recv calls
// expected to wait, this one included), so what arrives next reaches it
// through the dispatcher, not through Recv's first look.
func recvLater(t *testing.T, c *connector.SHM, key string, waiting int) <-chan connector.Message {
	t.Helper()
	got := make(chan connector.Message, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		m, err := c.RecvMessage(ctx, "0", key)
		if err != nil {
			t.Errorf("recv %s: %v", key, err)
		}
		got <- m
	}()
	shmtest.Eventually(t, wait, "the Recv of "+key+" to wait", func() bool { return c.Waiting() == waiting })
	return got
}

// A Python producer reaches Go waiters through the dispatcher, on the ring
// (its first put makes the ring, found through the registry; the second
// arrives in an attached ring, announced by a wakeup as the connector
// sends it) and on the per-key path (found through the lock file it
// closes: per-key puts here send no wakeup at all).
func TestPythonProducerToGoWaiters(t *testing.T) {
	s := shmtest.Scope(t)
	receiver := conntest.Open(t, s, "1", ring.DefaultCapacity)
	first, second, seg := shmtest.Key("py-wait-ring"), shmtest.Key("py-wait-ring2"), shmtest.Key("py-wait-seg")
	want := map[string]any{first: tensorPayload(21), second: plainPayload(22, false), seg: plainPayload(23, true)}

	got := recvLater(t, receiver, first, 1)
	py := startPeer(t, "put", s, "0", "1", first, "1", hexFile(t, frameBytes(t, want[first])), "--wake")
	parseDesc(t, py.line(t), first)
	if l := py.line(t); l != "ready" {
		t.Fatal(l)
	}
	m := <-got
	checkTree(t, first, want[first], m.Payload)
	if m.Producer.PID != py.cmd.Process.Pid {
		t.Fatalf("message from %v, want the Python producer %d", m.Producer, py.cmd.Process.Pid)
	}
	if st, err := proc.StartTime(m.Producer.PID); err != nil || st != m.Producer.Start {
		t.Fatalf("producer start time %d, /proc says %d (%v)", m.Producer.Start, st, err)
	}

	got = recvLater(t, receiver, second, 1)
	py.send(t, "put "+second+" 0 "+hexFile(t, plainBytes(t, want[second])))
	parseDesc(t, py.line(t), second)
	m = <-got
	checkTree(t, second, want[second], m.Payload)

	got = recvLater(t, receiver, seg, 1)
	segPeer := startPeer(t, "segput", seg, hexFile(t, plainBytes(t, want[seg])))
	if d := parseDesc(t, segPeer.line(t), seg); d.Shm == nil {
		t.Fatalf("segput descriptor %v", d)
	}
	m = <-got
	checkTree(t, seg, want[seg], m.Payload)
	if m.Producer != (proc.ID{}) {
		t.Fatalf("a per-key segment named producer %v", m.Producer)
	}
	segPeer.send(t, "")
	if l := segPeer.line(t); l != "closed" {
		t.Fatal(l)
	}
	segPeer.exit(t)
	py.send(t, "close")
	if l := py.line(t); l != "closed" {
		t.Fatal(l)
	}
	py.exit(t)
}

// A Python receiver races the Go dispatcher for the same publications: Go
// waits in Recv on every key, Python claims from the first key on, while a
// Go producer puts them. Each publication goes to exactly one of them. The
// producer sends no wakeups, so the dispatcher finds ring frames only at
// its polls (every millisecond here) and Python gets its share of them.
func TestPythonReceiverCompetesWithTheDispatcher(t *testing.T) {
	const n = 120
	for _, c := range claimPaths {
		t.Run(c.name, func(t *testing.T) {
			s := shmtest.Scope(t)
			sender, err := connector.Open(connector.Options{WakeupScope: s, StageID: "0", HostRingBytes: c.ringBytes, DisableWakeups: true})
			if err != nil {
				t.Fatal(err)
			}
			defer sender.Close()
			// Polls every millisecond: a race, not a rout.
			receiver, err := connector.Open(connector.Options{WakeupScope: s, StageID: "1", HostRingBytes: c.ringBytes, PollInterval: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer receiver.Close()
			keys := make([]string, n)
			want := map[string]any{}
			for i := range keys {
				keys[i] = shmtest.Key("race-wait")
				want[keys[i]] = wrapPayload(i)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type goGot struct {
				key string
				m   connector.Message
				err error
			}
			results := make(chan goGot, n)
			for _, key := range keys {
				go func() {
					m, err := receiver.RecvMessage(ctx, "0", key)
					results <- goGot{key, m, err}
				}()
			}
			shmtest.Eventually(t, wait, "every Go Recv to wait", func() bool { return receiver.Waiting() == n })

			py := startClaimer(t, s, keys, 40, c.ringBytes == connector.NoRing)
			for _, key := range keys {
				if _, d, err := sender.Put("0", "1", key, want[key]); err != nil || (d.HostRing != nil) != (c.ringBytes > 0) {
					t.Fatalf("put %s: %v %v", key, d, err)
				}
			}
			byPython := pythonClaims(t, py, want)
			// Every key Python did not claim reaches its Go waiter.
			byGo := map[string]bool{}
			for range n - len(byPython) {
				g := <-results
				if g.err != nil {
					t.Fatalf("recv %s: %v", g.key, g.err)
				}
				if _, twice := byPython[g.key]; twice {
					t.Fatalf("%s claimed by both receivers", g.key)
				}
				checkTree(t, g.key, want[g.key], g.m.Payload)
				byGo[g.key] = true
			}
			// The waiters of Python's keys get nothing: their publications
			// are gone.
			cancel()
			for range len(byPython) {
				if g := <-results; g.err == nil || byGo[g.key] {
					t.Fatalf("a second claim of %s (err %v)", g.key, g.err)
				}
			}
			t.Logf("Go dispatcher claimed %d, Python %d of %d", len(byGo), len(byPython), n)
		})
	}
}
