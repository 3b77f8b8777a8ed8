//go:build linux

package interop

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// wait bounds every exchange with a peer process; runLimit bounds a whole
// Python process, so a wedged peer never outlives its test.
const (
	wait     = 20 * time.Second
	runLimit = 60 * time.Second
)

// pythonArgs runs testdata/peer.py without writing bytecode into testdata
// (-B) and without the environment's or the user's site settings (-E -s).
func pythonArgs(t *testing.T, args ...string) (string, []string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: no Python peer")
	}
	peer, err := filepath.Abs(filepath.Join("testdata", "peer.py"))
	if err != nil {
		t.Fatal(err)
	}
	return python, append(append(pythonFlags[:len(pythonFlags):len(pythonFlags)], peer), args...)
}

// pythonFlags keep python3 from writing bytecode (-B) and from reading the
// environment's or the user's site settings (-E -s).
var pythonFlags = []string{"-B", "-E", "-s"}

// runPython runs python with argv to completion (bounded by runLimit), with
// stdin as its input, and returns its stdout; it fails the test, showing
// stderr, unless the process exits 0.
func runPython(t *testing.T, python string, argv []string, stdin []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, argv...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python %v: %v; stderr:\n%s", argv, err, stderr.String())
	}
	return out
}

// lines is an io.Writer that hands each complete line to a channel.
type lines struct {
	mu      sync.Mutex
	partial []byte
	out     chan string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.out <- string(l.partial[:i])
		l.partial = l.partial[i+1:]
	}
}

// syncBuffer collects a peer's stderr for the test log.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// pyPeer is a long-running peer.py process (put, segput).
type pyPeer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    chan string
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// startPeer starts peer.py with args. When the test ends, the peer's stdin
// is closed (it then closes its transport and exits) and it is waited for;
// the context kills it if it does not exit in time.
func startPeer(t *testing.T, args ...string) *pyPeer {
	t.Helper()
	python, argv := pythonArgs(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	cmd := exec.CommandContext(ctx, python, argv...)
	// The resource tracker Python starts inherits stdout and stderr; it
	// exits right after the peer, but never let it hold Wait for long.
	cmd.WaitDelay = 5 * time.Second
	p := &pyPeer{cmd: cmd, out: make(chan string, 1024), stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = &lines{out: p.out}
	cmd.Stderr = p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p.stdin = stdin
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.out)
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(wait):
			cmd.Process.Kill()
			<-p.done
		}
		cancel()
		if t.Failed() {
			t.Logf("peer %v stderr:\n%s", args, p.stderr.String())
		}
	})
	return p
}

// line returns the peer's next stdout line.
func (p *pyPeer) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.out:
		if !ok {
			t.Fatalf("peer %d ended without a line (%v); stderr:\n%s", p.cmd.Process.Pid, p.err, p.stderr.String())
		}
		return l
	case <-time.After(wait):
		t.Fatalf("peer %d: no line within %v; stderr:\n%s", p.cmd.Process.Pid, wait, p.stderr.String())
	}
	return ""
}

// send writes one line to the peer's stdin.
func (p *pyPeer) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("send to peer: %v", err)
	}
}

// expect reads the peer's next stdout line and fails the test unless it is
// want.
func (p *pyPeer) expect(t *testing.T, want string) {
	t.Helper()
	if l := p.line(t); l != want {
		t.Fatalf("peer %d printed %q, want %q", p.cmd.Process.Pid, l, want)
	}
}

// finish sends the peer the line that closes its transport (cmd), waits for
// its "closed" and for it to exit 0.
func (p *pyPeer) finish(t *testing.T, cmd string) {
	t.Helper()
	p.send(t, cmd)
	p.expect(t, "closed")
	p.exit(t)
}

// exit waits for the peer to exit and fails the test unless it exited 0.
func (p *pyPeer) exit(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(wait):
		t.Fatalf("peer %d did not exit within %v", p.cmd.Process.Pid, wait)
	}
	if p.err != nil {
		t.Fatalf("peer exited with %v; stderr:\n%s", p.err, p.stderr.String())
	}
}

// runPeer runs a one-shot peer.py command and returns its single stdout line.
func runPeer(t *testing.T, args ...string) string {
	t.Helper()
	python, argv := pythonArgs(t, args...)
	return strings.TrimSpace(string(runPython(t, python, argv, nil)))
}

// received is what `peer.py get` and `segget` print for a claim.
type received struct {
	Kind int    `json:"kind"`
	Size int    `json:"size"`
	Data string `json:"data"`
}

// parseReceived decodes a get/segget line: nil for a miss ("null").
func parseReceived(t *testing.T, line string) (*received, []byte) {
	t.Helper()
	var r *received
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("peer printed %q: %v", line, err)
	}
	if r == nil {
		return nil, nil
	}
	data, err := hex.DecodeString(r.Data)
	if err != nil {
		t.Fatalf("peer data: %v", err)
	}
	if len(data) != r.Size {
		t.Fatalf("peer reported size %d for %d bytes", r.Size, len(data))
	}
	return r, data
}

// pyGet claims key with the Python ring receiver. desc is a descriptor's
// JSON or ""; timeout "0" makes one attempt.
func pyGet(t *testing.T, scope, key, desc, timeout string) (*received, []byte) {
	t.Helper()
	args := []string{"get", scope, "0", "1", key}
	if desc != "" {
		args = append(args, desc)
	}
	return parseReceived(t, runPeer(t, append(args, "--timeout", timeout)...))
}

// hexFile writes data, hex encoded, to a new file for the peer to read.
func hexFile(t *testing.T, data []byte) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "payload-*.hex")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(f, hex.EncodeToString(data)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// startServer starts a long-lived Python ring receiver (peer.py serve) on
// edge 0->1 of scope s: its attached rings and cached discovery stamps
// persist across gets, as in a real stage.
func startServer(t *testing.T, s string) *pyPeer {
	t.Helper()
	p := startPeer(t, "serve", s, "0", "1")
	p.expect(t, "ready")
	return p
}

// get asks a serving peer for key: timeout "0" is one attempt; desc is a
// descriptor's JSON or "".
func (p *pyPeer) get(t *testing.T, key, timeout, desc string) (*received, []byte) {
	t.Helper()
	line := key + " " + timeout
	if desc != "" {
		line += " " + desc
	}
	p.send(t, line)
	return parseReceived(t, p.line(t))
}
