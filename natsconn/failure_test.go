//go:build linux

package natsconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"omnishm/config"
	"omnishm/internal/conntest"
	"omnishm/internal/race"
	"omnishm/internal/shmtest"
	"omnishm/stream"
)

// claimLog records which receiver claimed each key.
type claimLog struct {
	mu     sync.Mutex
	owners map[string][]int
}

func (l *claimLog) add(key string, receiver int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owners[key] = append(l.owners[key], receiver)
}

// checkOnce fails the test unless each of keys was claimed exactly once.
func (l *claimLog) checkOnce(t *testing.T, keys []string) {
	t.Helper()
	for _, k := range keys {
		if o := l.owners[k]; len(o) != 1 {
			t.Errorf("%s claimed by %v", k, o)
		}
	}
}

// compete runs receivers over keys in order: each Recv's every key, and the
// first to claim one cancels the others' wait for it. It returns when every
// key was claimed, or fails the test at the first error.
func compete(t *testing.T, receivers []*Connector, keys []string, log *claimLog) *sync.WaitGroup {
	ctxs := make([]context.Context, len(keys))
	cancels := make([]context.CancelFunc, len(keys))
	for i := range keys {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
	}
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
	})
	var wg sync.WaitGroup
	for r, c := range receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, key := range keys {
				v, _, err := c.Recv(ctxs[i], "0", key)
				switch {
				case err == nil:
					log.add(key, r)
					cancels[i]()
					if got := conntest.ChildCodes(v); got[0] != int64(i) {
						t.Errorf("%s: got %v", key, got)
					}
				case errors.Is(err, context.Canceled):
				default:
					t.Errorf("receiver %d, %s: %v", r, key, err)
					return
				}
			}
		}()
	}
	return &wg
}

func keyList(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}

// A server restart, with file storage: what it acknowledged before is still
// there after, a stream running across the restart loses nothing and no
// publication is claimed twice.
func TestServerRestartMidStream(t *testing.T) {
	ts := startServer(t)
	b := bucket(t)
	sender := openConn(t, ts.url(), b, "0")
	receivers := []*Connector{openConn(t, ts.url(), b, "1"), openConn(t, ts.url(), b, "1")}
	const n = 60
	keys := keyList("restart_", n)

	// Half of the stream is put while nobody receives, then the server
	// restarts with it unclaimed.
	for i := range n / 2 {
		conntest.MustPut(t, sender, "0", "1", keys[i], codes(1, int64(i)))
	}
	ts.restart()

	// Both receivers compete for every key while the rest is put and the
	// server restarts again: the puts after the halfway mark are made while
	// it is down, and wait for it to come back.
	log := &claimLog{owners: map[string][]int{}}
	done := compete(t, receivers, keys, log)
	halfway, down := make(chan struct{}), make(chan struct{})
	putErr := make(chan error, 1)
	go func() {
		for i := n / 2; i < n; i++ {
			if i == 3*n/4 {
				close(halfway)
				<-down
			}
			if _, _, err := sender.Put("0", "1", keys[i], codes(1, int64(i))); err != nil {
				putErr <- fmt.Errorf("put %s: %w", keys[i], err)
				return
			}
		}
		putErr <- nil
	}()
	<-halfway
	ts.stop()
	close(down)
	ts.launch()
	ts.ready()
	if err := <-putErr; err != nil {
		t.Fatal(err)
	}
	done.Wait()
	log.checkOnce(t, keys)
	// The client runs its reconnect callback asynchronously: it may count
	// after the first request on the new connection has already succeeded.
	shmtest.Eventually(t, wait, "both connectors to count a reconnect", func() bool {
		return receivers[0].Health().RemoteReconnects > 0 && sender.Health().RemoteReconnects > 0
	})
}

// A three-node cluster, the bucket replicated on all three: stopping the
// node that leads the bucket's stream in the middle of a request's chunk
// stream costs no chunk, duplicates none and keeps their order.
//
// Not under the race detector: the in-process nats-server (v2.15.2) races
// with itself in a clustered stream's apply path (batchStagedDiff.commit in
// processClusteredInboundMsg against applyStreamMsgOp in monitorStream),
// which failed one CI run of about two dozen; the report names no omnishm
// frame, and the plain run still tests this.
func TestClusterNodeStoppedMidStream(t *testing.T) {
	if race.Enabled {
		t.Skip("nats-server's own data race in its clustered apply path; see the comment")
	}
	c := startCluster(t)
	b := bucket(t)
	r3 := func(o *Options) { o.Replicas = 3 }
	sender := openConn(t, c.urls(), b, "0", r3)
	receiver := openConn(t, c.urls(), b, "1", r3)
	nc, js := client(t, c.urls())
	defer nc.Close()

	const chunks = 60
	s, err := stream.NewSender(sender, "0", "1", stream.SenderOptions{QueueLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := stream.NewReader(receiver, "0", "1", "clustered", stream.ReaderOptions{ProgressTimeout: wait})
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		for i := range chunks - 1 {
			if err := s.Send(context.Background(), "clustered", codes(1, int64(i))); err != nil {
				sent <- err
				return
			}
		}
		sent <- s.Finish(context.Background(), "clustered", codes(1, chunks-1))
	}()
	for i := 0; ; i++ {
		if i == chunks/3 {
			info, err := js.Stream(context.Background(), "KV_"+b)
			if err != nil {
				t.Fatal(err)
			}
			leader := info.CachedInfo().Cluster.Leader
			c.byName(leader).stop()
		}
		chunk, err := r.Next(context.Background())
		if err == io.EOF {
			if i != chunks {
				t.Fatalf("EOF after %d chunks", i)
			}
			break
		}
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if got := conntest.CodesOf(t, chunk); got[0] != int64(i) {
			t.Fatalf("chunk %d holds %v", i, got)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if n := <-s.Release("clustered"); n != 0 {
		t.Fatalf("release reclaimed %d claimed chunks", n)
	}
}

// within runs f and fails the test if it has not returned by the deadline:
// an unreachable server must never hang a call.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatalf("%s hung with the server gone", what)
	}
}

func TestUnreachableServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := "nats://" + l.Addr().String()
	l.Close()
	within(t, "Open", func() {
		_, err := Open(Options{Nats: config.Nats{URL: nobody, Timeout: 500 * time.Millisecond}})
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), nobody) {
			t.Errorf("open with nobody listening: %v", err)
		}
	})

	ts := startServer(t)
	short := func(o *Options) { o.Timeout = 500 * time.Millisecond }
	sender, receiver := edge(t, ts, short)
	conntest.MustPut(t, sender, "0", "1", "before", codes(1, 1))
	conntest.MustGet(t, receiver, "0", "1", "before", nil) // the receiver's watch is not started yet
	other := openConn(t, ts.url(), sender.opts.Bucket, "1", short)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		shmtest.Eventually(t, wait, "Recv to sleep", func() bool { return other.asleep.Load() == 1 })
		cancel()
	}()
	other.Recv(ctx, "0", "x") // starts its watch, then ends
	ts.stop()

	within(t, "Put", func() {
		if _, _, err := sender.Put("0", "1", "after", codes(1, 2)); !errors.Is(err, ErrUnreachable) {
			t.Errorf("put: %v", err)
		}
	})
	within(t, "Get", func() {
		if _, _, ok, err := receiver.Get("0", "1", "after", nil); ok || !errors.Is(err, ErrUnreachable) {
			t.Errorf("get: ok=%v %v", ok, err)
		}
	})
	within(t, "GetContext", func() {
		// The caller's context ends the wait first: a miss, as any done
		// context is.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, _, ok, err := receiver.GetContext(ctx, "0", "1", "after", nil); ok || err != nil {
			t.Errorf("get with a short context: ok=%v %v", ok, err)
		}
	})
	within(t, "Recv without a watch", func() {
		if _, _, err := receiver.Recv(context.Background(), "0", "after"); !errors.Is(err, ErrUnreachable) {
			t.Errorf("recv: %v", err)
		}
	})
	within(t, "Recv on its watch", func() {
		if _, _, err := other.Recv(context.Background(), "0", "after"); !errors.Is(err, ErrUnreachable) {
			t.Errorf("recv: %v", err)
		}
	})
	within(t, "Close", func() { sender.Close() })
}

func TestServerWithoutJetStream(t *testing.T) {
	ts := startServer(t, func(o *server.Options) { o.JetStream = false })
	_, err := Open(Options{Nats: config.Nats{URL: ts.url(), Timeout: time.Second}})
	if err == nil || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "jetstream") {
		t.Fatalf("open without JetStream: %v", err)
	}
}
