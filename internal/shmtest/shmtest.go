//go:build linux

// Package shmtest is the test harness shared by omnishm's packages: unique
// scopes and keys per test, child processes that re-run the test binary in a
// named role, and a TestMain check that nothing is left in /dev/shm.
//
// It builds on Linux only (build tag linux), as it needs /dev/shm.
package shmtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"omnishm/internal/reexec"
	"omnishm/scope"
)

var (
	counter atomic.Int64
	mu      sync.Mutex
	scopes  []string
)

// Main runs m, or the role this process was started in when it is a child
// started by Start (roles are registered with package reexec, under names
// of their own). After the tests it fails the run if any scope or key made
// by this package's helpers left a file in /dev/shm.
func Main(m *testing.M, roles map[string]func(args []string) int) {
	register(lockRole, holdLock)
	register(idleRole, idle)
	for name, fn := range roles {
		register(name, fn)
	}
	reexec.CheckUnknown()
	code := m.Run()
	left, err := leftovers()
	switch {
	case err != nil:
		// A check that cannot look must not pass.
		fmt.Fprintf(os.Stderr, "shmtest: cannot check /dev/shm for leftovers: %v\n", err)
	case len(left) > 0:
		fmt.Fprintf(os.Stderr, "shmtest: tests left files in /dev/shm: %v\n", left)
	}
	if code == 0 && (err != nil || len(left) > 0) {
		code = 1
	}
	os.Exit(code)
}

// Prefix starts every key made by Key in this process, so leftovers can be
// attributed to this test binary even while other packages run beside it.
func Prefix() string { return fmt.Sprintf("omt%d", os.Getpid()) }

// Key returns a key unique to this process and call, safe as a file name.
func Key(name string) string {
	return fmt.Sprintf("%s_%s_%d", Prefix(), name, counter.Add(1))
}

// Scope returns a wakeup scope unique to this test and remembers it, so Main
// can check that its wake directory, ring directory and rings are gone.
func Scope(t testing.TB) string {
	s := fmt.Sprintf("%s-%s-%d", Prefix(), strings.ReplaceAll(t.Name(), "/", "-"), counter.Add(1))
	mu.Lock()
	scopes = append(scopes, s)
	mu.Unlock()
	return s
}

// Leftovers lists the /dev/shm entries that belong to this process's keys and
// scopes (none when /dev/shm cannot be listed; Main fails the run then).
func Leftovers() []string {
	left, _ := leftovers()
	return left
}

func leftovers() ([]string, error) {
	entries, err := os.ReadDir(scope.ShmDir)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	var names []scope.Names
	for _, s := range scopes {
		names = append(names, scope.New(s))
	}
	mu.Unlock()
	keyPrefix := Prefix() + "_"
	var left []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, keyPrefix) || strings.HasPrefix(n, "shm_"+keyPrefix) {
			left = append(left, n)
			continue
		}
		for _, s := range names {
			if n == s.RingDirName || strings.HasPrefix(n, s.RingPrefix()) || filepath.Join(scope.ShmDir, n) == s.WakeDir {
				left = append(left, n)
			}
		}
	}
	return left, nil
}

// Proc is a child process running one role of the test binary. Lines it
// writes to stdout are read with Line (queued as they come, however many
// the test leaves unread, so the child never blocks and Wait, Kill and the
// cleanup always see it exit); lines sent with Send reach its stdin.
type Proc struct {
	Cmd   *exec.Cmd // for reading only
	child *reexec.Child
}

// noTests is a child's first argument: should its role be missing from
// TestMain, it runs no tests (and starts no children of its own).
const noTests = "-test.run=^$"

// roleName namespaces the test roles among the binary's re-exec roles.
func roleName(role string) string { return "shmtest/" + role }

// register makes fn a role of the test binary; a child in it runs fn with
// the arguments Start gave.
func register(role string, fn func(args []string) int) {
	reexec.Register(roleName(role), func(_ context.Context, args []string) int {
		if len(args) > 0 && args[0] == noTests {
			args = args[1:]
		}
		return fn(args)
	})
}

// Start re-runs the test binary as a child in role with args. The child
// dies with the test binary, and is killed when the test ends if it is
// still running.
func Start(t testing.TB, role string, args ...string) *Proc {
	t.Helper()
	return StartAs(t, nil, role, args...)
}

// StartAs is Start with the child running as cred's user and groups (nil:
// this process's); only root may give another user's.
func StartAs(t testing.TB, cred *syscall.Credential, role string, args ...string) *Proc {
	t.Helper()
	c, err := reexec.Start(roleName(role), reexec.Options{Args: append([]string{noTests}, args...), Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	return Adopt(t, c)
}

// Adopt makes c, a child started in a role of the test binary's own (such
// as the command line a cmd test runs), a Proc. It is killed when the test
// ends if it is still running.
func Adopt(t testing.TB, c *reexec.Child) *Proc {
	t.Cleanup(c.Kill) // no-op once it has exited
	return &Proc{Cmd: c.Cmd(), child: c}
}

// Line returns the child's next stdout line, failing the test after timeout.
func (p *Proc) Line(t testing.TB, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l, err := p.child.Line(ctx)
	switch {
	case err == nil:
		return l
	case err == io.EOF:
		t.Fatalf("child %d ended without a line", p.child.Pid())
	case ctx.Err() != nil:
		t.Fatalf("child %d: no line within %v", p.child.Pid(), timeout)
	default:
		t.Fatalf("child %d: %v", p.child.Pid(), err)
	}
	return ""
}

// Send writes one line to the child's stdin.
func (p *Proc) Send(t testing.TB, line string) {
	t.Helper()
	if err := p.child.Send(line); err != nil {
		t.Fatalf("send to child: %v", err)
	}
}

// Wait waits for the child to exit and returns its error (nil for exit 0),
// failing the test after timeout.
func (p *Proc) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-p.child.Done():
		return p.child.Err()
	case <-deadline.C:
		p.child.Kill()
		t.Fatalf("child %d did not exit within %v", p.child.Pid(), timeout)
	}
	return nil
}

// Expect fails the test unless the child's next line, within timeout, is
// want.
func (p *Proc) Expect(t testing.TB, timeout time.Duration, want string) {
	t.Helper()
	if l := p.Line(t, timeout); l != want {
		t.Fatalf("child %d said %q, want %q", p.child.Pid(), l, want)
	}
}

// Exited fails the test unless the child exits with status 0 within
// timeout.
func (p *Proc) Exited(t testing.TB, timeout time.Duration) {
	t.Helper()
	if err := p.Wait(t, timeout); err != nil {
		t.Fatalf("child %d: %v", p.child.Pid(), err)
	}
}

// Kill sends SIGKILL and waits for the child to be reaped.
func (p *Proc) Kill() { p.child.Kill() }

// Say writes one line to the parent (a child role's stdout).
func Say(format string, a ...any) { reexec.WriteLine(fmt.Sprintf(format, a...)) }

// Hear reads one line from the parent; it returns "" when the parent is gone.
func Hear() string {
	l, err := reexec.ReadLine()
	if err != nil {
		return ""
	}
	return l
}

// Eventually polls cond until it holds, failing the test at the deadline.
// Use it to wait on conditions instead of sleeping.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Await receives from ch, failing the test if nothing arrives within
// timeout: the deadline of a wait on a goroutine's result, not a timing.
func Await[T any](t testing.TB, timeout time.Duration, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
	var zero T
	return zero
}

// Jitter yields the processor a random number of times below n, so that
// goroutines racing one another meet at varied points from run to run.
func Jitter(n int) {
	for range rand.N(n) {
		runtime.Gosched()
	}
}

// Map is f of each element of s, in order: the one field a test compares
// of each result, for example.
func Map[T, U any](s []T, f func(T) U) []U {
	out := make([]U, 0, len(s))
	for _, x := range s {
		out = append(out, f(x))
	}
	return out
}

// CodeBytes is the raw payload the ring and interop tests move as message
// i: 56 little-endian int64 codes, i*100 + j for code j.
func CodeBytes(i int) []byte {
	b := make([]byte, 56*8)
	for j := range 56 {
		binary.LittleEndian.PutUint64(b[j*8:], uint64(i*100+j))
	}
	return b
}

// Patience is how long a test waits for another process, a goroutine or a
// condition before it fails: a deadline that only a hang reaches, even on a
// loaded machine.
const Patience = 20 * time.Second

// ChildFailed reports a child role's failure on its stderr, which the
// parent's Proc shows when the test fails, and returns the role's exit
// status for it: `return shmtest.ChildFailed(err)`.
func ChildFailed(err error) int {
	fmt.Fprintln(os.Stderr, "child:", err)
	return 1
}
