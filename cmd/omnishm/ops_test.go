//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"omnishm/internal/reexec"
	"omnishm/internal/shmtest"
	"omnishm/jsonform"
	"omnishm/scope"
	"omnishm/shmstate"
)

// patience bounds every wait on a child process in these tests.
const patience = 20 * time.Second

// cliProc is a long-running `omnishm` child (send, mostly) whose stdout is
// read line by line while it runs.
type cliProc struct {
	cmd    *exec.Cmd
	child  *reexec.Child
	stderr bytes.Buffer
	mu     sync.Mutex
}

// startCLI starts `omnishm args...` with stdin as its input. It is killed
// when the test ends if it is still running.
func startCLI(t *testing.T, stdin []byte, args ...string) *cliProc {
	t.Helper()
	p := &cliProc{}
	opts := cliOptions(args)
	opts.Stderr = &lockedWriter{w: &p.stderr, mu: &p.mu}
	c, err := reexec.Start(cliRole, opts)
	if err != nil {
		t.Fatal(err)
	}
	p.child, p.cmd = c, c.Cmd()
	t.Cleanup(c.Kill) // no-op once it has exited
	go func() {
		c.Write(stdin)
		c.CloseInput()
	}()
	return p
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// line returns the child's next stdout line.
func (p *cliProc) line(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l, err := p.child.Line(ctx)
	switch {
	case err == nil:
		return l
	case ctx.Err() != nil:
		t.Fatalf("no line from child within %v; stderr %q", patience, p.errText())
	default:
		<-p.child.Done()
		t.Fatalf("child ended (status %d) without a line (%v); stderr %q", p.code(), err, p.errText())
	}
	return ""
}

// wait returns the child's exit status.
func (p *cliProc) wait(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if p.child.Wait(ctx); ctx.Err() != nil {
		t.Fatalf("child did not exit within %v; stderr %q", patience, p.errText())
	}
	return p.code()
}

func (p *cliProc) code() int { return p.cmd.ProcessState.ExitCode() }

func (p *cliProc) errText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (p *cliProc) signal(sig syscall.Signal) { p.cmd.Process.Signal(sig) }

// opsScope returns a unique scope whose empty directories are removed when
// the test ends (the connector removes its files; directories shared by
// both ends may stay behind).
func opsScope(t *testing.T) string {
	s := shmtest.Scope(t)
	n := scope.New(s)
	t.Cleanup(func() {
		os.Remove(n.WakeDir)
		os.Remove(n.RingDir())
	})
	return s
}

// sweepAfterKills prunes scope s when the test ends, FIFOs included at any
// age: processes killed by SIGKILL leave their wakeup FIFO behind (the
// leftover check would otherwise blame the next test).
func sweepAfterKills(t *testing.T, s string) {
	t.Cleanup(func() {
		shmstate.Prune(shmstate.PruneOptions{Options: shmstate.Options{Scopes: []string{s}, KeyPrefix: shmtest.Prefix()}})
	})
}

// canonical is a JSON-form text printed the way the CLI prints it.
func canonical(t *testing.T, text []byte) string {
	t.Helper()
	v, err := jsonform.Unmarshal(bytes.TrimSpace(text))
	if err != nil {
		t.Fatalf("JSON form %q: %v", text, err)
	}
	b, err := jsonform.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// descriptorKind says which path a descriptor line names.
func descriptorKind(t *testing.T, line string) string {
	t.Helper()
	var d map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &d); err != nil {
		t.Fatalf("descriptor %q: %v", line, err)
	}
	for _, k := range []string{"host_ring", "shm"} {
		if _, ok := d[k]; ok {
			return k
		}
	}
	t.Fatalf("descriptor %q names no path", line)
	return ""
}
