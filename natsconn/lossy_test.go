//go:build linux

package natsconn

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
)

// proxy forwards loopback connections to a server and can lose an answer:
// once armed, it cuts the connection right after forwarding the client's
// first chunk that contains a marker, so the server acts on that message
// but its reply never arrives. It can also hold new connections.
type proxy struct {
	t      testing.TB
	l      net.Listener
	target string

	mu     sync.Mutex
	marker []byte
	cut    chan struct{} // closed once it has cut
	hold   chan struct{} // new connections wait for it to close
	conns  []net.Conn
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, l: l, target: target}
	go p.accept()
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		if p.hold != nil {
			close(p.hold)
			p.hold = nil
		}
		p.mu.Unlock()
	})
	return p
}

func (p *proxy) url() string { return "nats://" + p.l.Addr().String() }

func (p *proxy) accept() {
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		hold := p.hold
		p.conns = append(p.conns, client)
		p.mu.Unlock()
		go func() {
			if hold != nil {
				<-hold
			}
			server, err := net.Dial("tcp", p.target)
			if err != nil {
				client.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, server)
			p.mu.Unlock()
			go func() { io.Copy(client, server); client.Close() }()
			p.forward(client, server)
		}()
	}
}

// forward copies client to server, cutting both after an armed marker.
func (p *proxy) forward(client, server net.Conn) {
	defer server.Close()
	buf := make([]byte, 64<<10)
	var tail []byte // the end of the previous chunk: a marker may straddle two reads
	for {
		n, err := client.Read(buf)
		if n > 0 {
			// The cut is announced before the chunk is forwarded: the
			// server's answer may reach the client (and end its call)
			// before this goroutine runs again.
			seen := append(tail, buf[:n]...)
			p.mu.Lock()
			hit := p.marker != nil && bytes.Contains(seen, p.marker)
			tail = append(tail[:0], seen[max(0, len(seen)-64):]...)
			if hit {
				p.marker = nil
				close(p.cut)
			}
			p.mu.Unlock()
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
			if hit {
				// The server reads what was written before the close.
				client.Close()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// arm makes the proxy cut after the next client chunk holding marker.
func (p *proxy) arm(marker string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.cut = []byte(marker), make(chan struct{})
	return p.cut
}

// holdNew keeps new connections waiting until release.
func (p *proxy) holdNew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = make(chan struct{})
}

func (p *proxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.hold)
	p.hold = nil
}

// A receiver whose claim reached the server but whose answer was lost
// still gets the publication: it asks the server, after reconnecting,
// whose marker retired it. Taking the loss for a lost race would drop the
// payload for good.
func TestLostClaimAnswerStillDelivers(t *testing.T) {
	ts := startServer(t)
	b := bucket(t)
	sender := openConn(t, ts.url(), b, "0")
	p := startProxy(t, ts.s.Addr().String())
	receiver := openConn(t, p.url(), b, "1", func(o *Options) { o.Timeout = 10 * time.Second })
	conntest.MustPut(t, sender, "0", "1", "lost-answer", codes(2, 31))
	cut := p.arm("KV-Operation: PURGE")
	v, _, ok, err := receiver.Get("0", "1", "lost-answer", nil)
	select {
	case <-cut:
	default:
		t.Fatalf("the proxy never cut the claim's connection (get: ok=%v err=%v)", ok, err)
	}
	if err != nil || !ok || conntest.CodesOf(t, v)[0] != 31 {
		t.Fatalf("get across a lost answer: ok=%v v=%v err=%v", ok, v, err)
	}
	conntest.Missing(t, sender, "0", "1", "lost-answer", nil)
	// nats.go runs the reconnect handler that counts it on a goroutine of
	// its own, possibly after the Get has returned.
	shmtest.Eventually(t, wait, "the reconnect counted", func() bool { return receiver.Health().RemoteReconnects > 0 })
	if h := receiver.Health(); h.Gets != 1 || h.RemoteClaimsLost != 0 {
		t.Fatalf("health %+v", h)
	}
}

// A producer whose put was stored but whose answer was lost, and which a
// receiver claimed while the producer was away (across a server restart,
// which forgets the message ids it had seen), must not put it again: the
// claim's marker names the put, so the producer learns it was delivered.
func TestLostPutAnswerAfterAClaimIsNotPutTwice(t *testing.T) {
	ts := startServer(t)
	b := bucket(t)
	receiver := openConn(t, ts.url(), b, "1")
	p := startProxy(t, ts.s.Addr().String())
	sender := openConn(t, p.url(), b, "0")
	cut := p.arm("Omnishm-Kind")
	p.holdNew() // the producer cannot come back until released
	type result struct {
		d   Descriptor
		err error
	}
	put := make(chan result, 1)
	go func() {
		_, d, err := sender.Put("0", "1", "lost-put", codes(1, 77))
		put <- result{d, err}
	}()
	<-cut
	var got any
	shmtest.Eventually(t, wait, "the stored put to be claimed", func() bool {
		v, _, ok, err := receiver.Get("0", "1", "lost-put", nil)
		if err != nil {
			t.Fatal(err)
		}
		got = v
		return ok
	})
	if conntest.CodesOf(t, got)[0] != 77 {
		t.Fatalf("claimed %v", got)
	}
	ts.restart()
	p.release()
	r := <-put
	if r.err != nil {
		t.Fatalf("put across a lost answer: %v", r.err)
	}
	if r.d.Nats == nil || r.d.Nats.Revision == 0 {
		t.Fatalf("descriptor %v", r.d)
	}
	// Nothing new to claim: the put was not made twice.
	conntest.Missing(t, receiver, "0", "1", "lost-put", nil)
	nc, js := client(t, ts.url())
	defer nc.Close()
	s, err := js.Stream(context.Background(), "KV_"+b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), "$KV."+b+".0.1.lost-put")
	if err != nil || m.Header.Get(hdrOperation) != opPurge {
		t.Fatalf("last message of the key: %v %v", m, err)
	}
	// And the producer does not count it as its own to retire.
	if sender.Cleanup("lost-put") {
		t.Fatal("cleanup retired a claimed put")
	}
}
