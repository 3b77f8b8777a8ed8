//go:build linux

package natsconn

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
)

// wait bounds every wait of these tests for a condition, a child or a
// server: far above what any of them takes, so only a hang trips it.
const wait = 30 * time.Second

// testServer is a nats-server running in this process, JetStream storing
// into a directory of the test's.
type testServer struct {
	t    testing.TB
	opts *server.Options
	s    *server.Server
}

// serverOptions are a loopback server's with JetStream in a directory of
// the test's.
func serverOptions(t testing.TB, name string) *server.Options {
	o := embeddedOptions(t.TempDir())
	o.ServerName = name
	o.JetStreamMaxMemory, o.JetStreamMaxStore = 256<<20, 1<<30
	return o
}

// startServer starts a server on a random loopback port; configure may
// change its options first. It is shut down when the test ends.
func startServer(t testing.TB, configure ...func(*server.Options)) *testServer {
	t.Helper()
	o := serverOptions(t, "solo")
	for _, f := range configure {
		f(o)
	}
	ts := &testServer{t: t, opts: o}
	ts.launch()
	t.Cleanup(ts.stop)
	ts.ready()
	return ts
}

// launch starts the server; a clustered one is ready for clients only
// once its peers run too.
func (ts *testServer) launch() {
	ts.t.Helper()
	s, err := server.NewServer(ts.opts)
	if err != nil {
		ts.t.Fatal(err)
	}
	go s.Start() // a clustered server's Start waits for its peers
	ts.s = s
}

func (ts *testServer) ready() {
	ts.t.Helper()
	if !ts.s.ReadyForConnections(wait) {
		ts.t.Fatalf("server %s did not start", ts.opts.ServerName)
	}
	// Later starts reuse the port and store, as a restarted server would.
	ts.opts.Port = ts.s.Addr().(*net.TCPAddr).Port
}

func (ts *testServer) url() string { return ts.s.ClientURL() }

func (ts *testServer) stop() {
	if ts.s != nil {
		ts.s.Shutdown()
		ts.s.WaitForShutdown()
		ts.s = nil
	}
}

// restart stops the server and starts it again on the same port and store.
func (ts *testServer) restart() {
	ts.t.Helper()
	ts.stop()
	ts.launch()
	ts.ready()
}

// cluster is three servers routed together, JetStream clustered.
type cluster []*testServer

func startCluster(t testing.TB) cluster {
	t.Helper()
	// Every node must know the routes before it starts (the cluster's
	// JetStream refuses to start on a node without any): take three free
	// loopback ports for them.
	var routes []string
	var ports []int
	var held []net.Listener // all at once, so the three differ
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		routes = append(routes, fmt.Sprintf("nats://%s", l.Addr()))
	}
	for _, l := range held {
		l.Close()
	}
	var c cluster
	for i := range 3 {
		o := serverOptions(t, fmt.Sprintf("n%d", i))
		o.Cluster = server.ClusterOpts{Name: "omnishm", Host: "127.0.0.1", Port: ports[i]}
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		c = append(c, &testServer{t: t, opts: o})
	}
	for _, ts := range c {
		ts.launch()
		t.Cleanup(ts.stop)
	}
	for _, ts := range c {
		ts.ready()
	}
	// Ready once the three have elected a meta leader and all are online
	// for a stream's placement: a stream on all three can be created.
	nc, js := client(t, c.urls())
	defer nc.Close()
	shmtest.Eventually(t, wait, "the cluster's JetStream", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}, Replicas: 3, Storage: jetstream.MemoryStorage})
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := js.DeleteStream(ctx, "PROBE"); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c cluster) urls() string {
	var u []string
	for _, s := range c {
		u = append(u, s.url())
	}
	return strings.Join(u, ",")
}

// byName returns the cluster's server named name.
func (c cluster) byName(name string) *testServer {
	for _, s := range c {
		if s.opts.ServerName == name {
			return s
		}
	}
	return nil
}

// client is a plain NATS client of the tests' own, for looking at the
// server's state from outside the connector.
func client(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

var bucketCount atomic.Int64

// bucket names a bucket unique to this test and process.
func bucket(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if plain(byte(r)) && r < 128 {
			return r
		}
		return '-'
	}, t.Name())
	return fmt.Sprintf("%s-%d", name[:min(len(name), 40)], bucketCount.Add(1))
}

// openConn opens a connector of stage to the server at url, closed when the
// test ends.
func openConn(t testing.TB, url, bucket, stage string, configure ...func(*Options)) *Connector {
	t.Helper()
	o := Options{Nats: config.Nats{URL: url, Bucket: bucket, Timeout: wait}, StageID: connector.Stage(stage)}
	for _, f := range configure {
		f(&o)
	}
	c, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// edge opens a sender (stage 0) and a receiver (stage 1) on one bucket.
func edge(t testing.TB, ts *testServer, configure ...func(*Options)) (sender, receiver *Connector) {
	t.Helper()
	b := bucket(t)
	return openConn(t, ts.url(), b, "0", configure...), openConn(t, ts.url(), b, "1", configure...)
}

// codes is the connector tests' payload maker: {"codes": int64[n]} with
// values start, start+1, ...
var codes = conntest.Codes

// first gets key and returns its first code.
func first(t testing.TB, c *Connector, from, to, key string, d *Descriptor) int64 {
	t.Helper()
	return conntest.CodesOf(t, conntest.MustGet(t, c, from, to, key, d))[0]
}
