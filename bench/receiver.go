//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"omnishm/connector"
	"omnishm/internal/hostclock"
	"omnishm/internal/reexec"
)

// The receiver process of the modes that have one is this executable
// again, in role receiverRole. The parent sends one JSON request a line
// on its stdin; the receiver serves it and prints lines of integers
// separated by spaces (what each mode's cell reads), or "error: ...".
// Closing its stdin ends it. The uds baseline's socket is its descriptor 3.
const (
	receiverRole  = "omnishm-bench-receiver"
	receiverReady = "ready"
)

func init() { reexec.Register(receiverRole, serveReceiver) }

// receiverStopGrace bounds how long an interrupted receiver may take to
// clean up before it is killed.
const receiverStopGrace = 10 * time.Second

// recvTimeout bounds the wait for one message, or one acknowledgement.
const recvTimeout = 30 * time.Second

// request is one cell the parent asks the receiver process to serve.
type request struct {
	Mode      Mode   `json:"mode"`
	Transport string `json:"transport"`
	endpointSettings
	KeyPrefix string `json:"key_prefix"`
	Run       int    `json:"run"`
	Messages  int    `json:"messages"`
	Size      int    `json:"size"` // uds: bytes per message
	// Stream: the warm-up's messages, and how many messages one
	// acknowledgement covers.
	Warmup int `json:"warmup,omitempty"`
	Ack    int `json:"ack,omitempty"`
	// Fanout: what the Messages waiters block in, and how long they are
	// measured idle.
	WaitIn string        `json:"wait_in,omitempty"`
	Idle   time.Duration `json:"idle,omitempty"`
	// Fanout: the pipelined rounds after the one-by-one deliveries.
	Rounds int `json:"rounds,omitempty"`
}

// receiver is the parent's view of the receiver process.
type receiver struct {
	child *reexec.Child
	sock  *os.File // this end of the uds baseline's socket pair
}

func startReceiver() (*receiver, error) {
	fds, err := socketpair()
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "bench-uds"), os.NewFile(uintptr(fds[1]), "bench-uds-peer")
	defer theirs.Close()
	c, err := reexec.Start(receiverRole, reexec.Options{ExtraFiles: []*os.File{theirs}, Ready: receiverReady})
	if err != nil {
		mine.Close()
		return nil, fmt.Errorf("start receiver: %w", err)
	}
	return &receiver{child: c, sock: mine}, nil
}

func (p *receiver) request(r request) error {
	b, _ := json.Marshal(r)
	if err := p.child.Send(string(b)); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	return nil
}

// numbers reads the receiver's next line: n integers, or its error.
func (p *receiver) numbers(ctx context.Context, n int) ([]int64, error) {
	line, err := p.child.Line(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, errors.New("receiver process ended early")
	}
	fields := strings.Fields(line)
	out := make([]int64, len(fields))
	for i, f := range fields {
		if out[i], err = strconv.ParseInt(f, 10, 64); err != nil {
			break
		}
	}
	if err != nil || len(out) != n {
		return nil, fmt.Errorf("receiver: %s", line)
	}
	return out, nil
}

// numbersWithin is numbers, failing after timeout.
func (p *receiver) numbersWithin(ctx context.Context, timeout time.Duration, n int) ([]int64, error) {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := p.numbers(tctx, n)
	if err != nil && ctx.Err() == nil && tctx.Err() != nil {
		err = fmt.Errorf("receiver: nothing heard within %v", timeout)
	}
	return v, err
}

// arrival reads the receiver's next line: the time a message arrived.
func (p *receiver) arrival(ctx context.Context) (time.Duration, error) {
	v, err := p.numbers(ctx, 1)
	if err != nil {
		return 0, err
	}
	return time.Duration(v[0]), nil
}

// sendUDS writes one framed message to the baseline socket.
func (p *receiver) sendUDS(frame []byte) error {
	_, err := p.sock.Write(frame)
	return err
}

// finish closes the receiver's stdin (its signal to close and exit) and
// waits for it.
func (p *receiver) finish(ctx context.Context) error {
	p.child.CloseInput()
	p.sock.Close()
	if err := p.child.Wait(ctx); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	return nil
}

// stop ends a receiver that finish did not: an interrupted or failed run.
// It asks first (the receiver's Recv returns and it closes its connectors,
// removing its wake FIFO) and kills it only after receiverStopGrace, so an
// interrupted bench leaves /dev/shm clean.
func (p *receiver) stop() {
	p.sock.Close()
	p.child.Stop(receiverStopGrace)
}

// say writes one line of integers to the parent.
func say(v ...int64) error {
	var b []byte
	for i, x := range v {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return reexec.WriteLine(string(b))
}

// serveReceiver is the receiver process: it serves the parent's requests
// from stdin until end of file.
func serveReceiver(ctx context.Context, _ []string) int {
	sock := os.NewFile(3, "bench-uds")
	conns := map[string]connector.Receiver{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	fail := func(err error) int {
		reexec.WriteLine("error: " + err.Error())
		return 1
	}
	reexec.WriteLine(receiverReady)
	var buf []byte
	for {
		line, err := reexec.ReadLine()
		if err != nil {
			return 0 // the parent is done
		}
		var req request
		if err := json.Unmarshal([]byte(line), &req); err != nil {
			return fail(err)
		}
		var conn connector.Receiver
		if req.Transport != UDS {
			id := req.Transport + "/" + req.Scope + "/" + req.Nats.URL
			if conn = conns[id]; conn == nil {
				c, err := req.open(req.Transport, benchTo)
				if err != nil {
					return fail(err)
				}
				conns[id], conn = c, c
			}
		}
		if cap(buf) < req.Size {
			buf = make([]byte, req.Size)
		}
		in := incoming{conn: conn, sock: sock, buf: buf[:req.Size], req: req}
		in.into, in.mem = req.supplied(conn, req.Size)
		switch req.Mode {
		case Stream:
			err = serveStream(ctx, in)
		case Fanout:
			err = serveFanout(ctx, conn, req)
		default:
			err = serveLatency(ctx, in)
		}
		if err != nil {
			return fail(err)
		}
	}
}

// incoming is where a latency or stream request's messages arrive: a
// connector, or the socket into buf.
type incoming struct {
	conn connector.Receiver // nil for uds
	sock *os.File
	buf  []byte
	req  request
	into connector.IntoReceiver // conn, under Plan.Supplied
	mem  *recycled
}

// next receives message i; ctx bounds a connector's wait.
func (in incoming) next(ctx context.Context, i int) error {
	if in.into != nil {
		_, err := in.into.RecvInto(ctx, benchFrom, key(in.req.KeyPrefix, in.req.Run, i), in.mem.next())
		return err
	}
	if in.conn != nil {
		_, _, err := in.conn.Recv(ctx, benchFrom, key(in.req.KeyPrefix, in.req.Run, i))
		return err
	}
	seq, err := readUDS(in.sock, in.buf)
	if err == nil && seq != i {
		err = fmt.Errorf("uds message %d arrived where %d was due", seq, i)
	}
	return err
}

// serveLatency receives a latency cell's messages, reporting each arrival's
// host-wide monotonic time in nanoseconds.
func serveLatency(ctx context.Context, in incoming) error {
	for i := range in.req.Messages {
		rctx, cancel := context.WithTimeout(ctx, recvTimeout)
		err := in.next(rctx, i)
		cancel()
		if err != nil {
			return err
		}
		if err := say(int64(hostclock.Now())); err != nil {
			return err
		}
	}
	return nil
}
