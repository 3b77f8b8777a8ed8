//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"sync"
	"syscall"
	"testing"

	"omnishm/internal/reexec"
	"omnishm/internal/shmtest"
	"omnishm/jsonform"
	"omnishm/scope"
	"omnishm/shmstate"
)

// cliProc is a long-running `omnishm` child (send, mostly) whose stdout is
// read line by line while it runs.
type cliProc struct {
	*shmtest.Proc
	stderr bytes.Buffer
	mu     sync.Mutex
}

// startCLI starts `omnishm args...` with stdin as its input. It is killed
// when the test ends if it is still running; its stderr is logged then if
// the test failed.
func startCLI(t *testing.T, stdin []byte, args ...string) *cliProc {
	t.Helper()
	p := &cliProc{}
	opts := cliOptions(args)
	opts.Stderr = &lockedWriter{w: &p.stderr, mu: &p.mu}
	c, err := reexec.Start(cliRole, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the kill and reads all of stderr.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("omnishm %q: %v; stderr %q", args, c.Err(), p.errText())
		}
	})
	p.Proc = shmtest.Adopt(t, c)
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
	return p.Line(t, shmtest.Patience)
}

// wait returns the child's exit status.
func (p *cliProc) wait(t *testing.T) int {
	t.Helper()
	p.Wait(t, shmtest.Patience) // its error is the status's
	return p.Cmd.ProcessState.ExitCode()
}

func (p *cliProc) errText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (p *cliProc) signal(sig syscall.Signal) { p.Cmd.Process.Signal(sig) }

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
