//go:build linux

package interop

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"omnishm/internal/reexec"
)

// wait bounds every exchange with a peer process; runLimit bounds a whole
// one-shot Python process, so a wedged one never outlives its test (a
// long-running peer is killed when its test ends, at the latest).
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

// pyPeer is a long-running peer.py process (put, segput, serve), run as
// reexec runs a child: lines both ways, and it dies with this process.
type pyPeer struct {
	child  *reexec.Child
	stderr *syncBuffer
}

// startPeer starts peer.py with args. When the test ends, the peer's stdin
// is closed (it then closes its transport and exits) and it is waited for;
// it is killed if it does not exit in time.
func startPeer(t *testing.T, args ...string) *pyPeer {
	t.Helper()
	python, argv := pythonArgs(t, args...)
	p := &pyPeer{stderr: &syncBuffer{}}
	c, err := reexec.Start("interop-peer", reexec.Options{Exe: python, Argv0: python, Args: argv, Stderr: p.stderr})
	if err != nil {
		t.Fatal(err)
	}
	p.child = c
	t.Cleanup(func() {
		c.CloseInput()
		select {
		case <-c.Done():
		case <-time.After(wait):
			c.Kill()
		}
		if t.Failed() {
			t.Logf("peer %v stderr:\n%s", args, p.stderr.String())
		}
	})
	return p
}

// pid is the peer's process id.
func (p *pyPeer) pid() int { return p.child.Pid() }

// line returns the peer's next stdout line.
func (p *pyPeer) line(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	l, err := p.child.Line(ctx)
	if err != nil {
		t.Fatalf("peer %d: no line (%v; exit status %v); stderr:\n%s", p.pid(), err, p.child.Err(), p.stderr.String())
	}
	return l
}

// send writes one line to the peer's stdin.
func (p *pyPeer) send(t *testing.T, line string) {
	t.Helper()
	if err := p.child.Send(line); err != nil {
		t.Fatalf("send to peer: %v", err)
	}
}

// expect reads the peer's next stdout line and fails the test unless it is
// want.
func (p *pyPeer) expect(t *testing.T, want string) {
	t.Helper()
	if l := p.line(t); l != want {
		t.Fatalf("peer %d printed %q, want %q", p.pid(), l, want)
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
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := p.child.Wait(ctx); err != nil {
		t.Fatalf("peer %d: %v; stderr:\n%s", p.pid(), err, p.stderr.String())
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
	path := filepath.Join(t.TempDir(), "payload.hex")
	if err := os.WriteFile(path, []byte(hex.EncodeToString(data)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
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
