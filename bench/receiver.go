package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"omnishm/connector"
	"omnishm/internal/hostclock"
	"omnishm/internal/reexec"
)

// The receiver process of latency mode is this executable again, in role
// receiverRole. The parent sends one JSON request a line on its stdin; the
// receiver serves it and prints one line per message: the host-wide
// monotonic time of its arrival in nanoseconds, or "error: ...". Closing
// its stdin ends it. The uds baseline's socket is its descriptor 3.
const (
	receiverRole  = "omnishm-bench-receiver"
	receiverReady = "ready"
)

func init() { reexec.Register(receiverRole, serveReceiver) }

// receiverStopGrace bounds how long an interrupted receiver may take to
// clean up before it is killed.
const receiverStopGrace = 10 * time.Second

// recvTimeout bounds the receiver's wait for one message.
const recvTimeout = 30 * time.Second

// request is one cell the parent asks the receiver process to serve.
type request struct {
	Transport string `json:"transport"`
	Scope     string `json:"scope"`
	RingBytes int    `json:"ring_bytes"`
	KeyPrefix string `json:"key_prefix"`
	Run       int    `json:"run"`
	Messages  int    `json:"messages"`
	Size      int    `json:"size"` // uds: bytes per message
}

// receiver is the parent's view of the receiver process.
type receiver struct {
	child *reexec.Child
	sock  *os.File // this end of the uds baseline's socket pair
	frame []byte
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

// arrival reads the receiver's next line: the time a message arrived, or
// its error.
func (p *receiver) arrival(ctx context.Context) (time.Duration, error) {
	line, err := p.child.Line(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return 0, ctx.Err()
	case err != nil:
		return 0, errors.New("receiver process ended early")
	}
	ns, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("receiver: %s", line)
	}
	return time.Duration(ns), nil
}

// sendUDS writes one length-prefixed message to the baseline socket.
func (p *receiver) sendUDS(b []byte) error {
	p.frame = binary.LittleEndian.AppendUint64(p.frame[:0], uint64(len(b)))
	p.frame = append(p.frame, b...)
	_, err := p.sock.Write(p.frame)
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

// serveReceiver is the receiver process: it serves the parent's requests
// from stdin until end of file, reporting each arrival time on stdout.
func serveReceiver(ctx context.Context, _ []string) int {
	sock := os.NewFile(3, "bench-uds")
	conns := map[string]*connector.SHM{}
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
		var conn *connector.SHM
		if req.Transport != UDS {
			id := req.Transport + "/" + req.Scope
			if conn = conns[id]; conn == nil {
				c, err := open(req.Scope, req.RingBytes, req.Transport, benchTo)
				if err != nil {
					return fail(err)
				}
				conns[id], conn = c, c
			}
		}
		if cap(buf) < req.Size {
			buf = make([]byte, req.Size)
		}
		for i := range req.Messages {
			if conn != nil {
				rctx, cancel := context.WithTimeout(ctx, recvTimeout)
				_, _, err := conn.Recv(rctx, benchFrom, key(req.KeyPrefix, req.Run, i))
				cancel()
				if err != nil {
					return fail(err)
				}
			} else if err := readUDS(sock, buf[:req.Size]); err != nil {
				return fail(err)
			}
			if err := reexec.WriteLine(strconv.FormatInt(int64(hostclock.Now()), 10)); err != nil {
				return 1
			}
		}
	}
}
