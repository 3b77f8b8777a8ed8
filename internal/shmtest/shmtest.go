// Package shmtest is the test harness shared by omnishm's packages: unique
// scopes and keys per test, child processes that re-run the test binary in a
// named role, and a TestMain check that nothing is left in /dev/shm.
package shmtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"omnishm/scope"
)

const roleEnv = "OMNISHM_TEST_ROLE"

var (
	counter atomic.Int64
	mu      sync.Mutex
	scopes  []string
)

// Main runs m, or the role named in the environment when this process is a
// child started by Start. After the tests it fails the run if any scope or
// key made by this package's helpers left a file in /dev/shm.
func Main(m *testing.M, roles map[string]func(args []string) int) {
	if role := os.Getenv(roleEnv); role != "" {
		fn, ok := roles[role]
		if role == lockRole {
			fn, ok = holdLock, true
		}
		if !ok {
			fmt.Fprintf(os.Stderr, "shmtest: unknown role %q\n", role)
			os.Exit(2)
		}
		os.Exit(fn(os.Args[len(os.Args)-childArgs():]))
	}
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
// writes to stdout are read with Line; lines sent with Send reach its stdin.
type Proc struct {
	Cmd *exec.Cmd
	in  io.WriteCloser
	// Stdout is read into queue as it comes, however many lines the test
	// leaves unread, so the child never blocks on a full pipe and Wait,
	// Kill and the cleanup always see it exit.
	mu      sync.Mutex
	queue   []string
	eof     bool
	readErr error         // why stdout stopped being read as lines, if not EOF
	more    chan struct{} // holds a token when a line was queued or stdout ended
	done    chan struct{}
	err     error
}

// childArgs is how many of a child's trailing arguments are its role's.
func childArgs() int {
	n := 0
	fmt.Sscan(os.Getenv(roleEnv+"_ARGS"), &n)
	return min(max(n, 0), len(os.Args)-1)
}

// Start re-runs the test binary as a child in role with args. The child is
// killed when the test ends, if it is still running.
func Start(t testing.TB, role string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role, fmt.Sprintf("%s_ARGS=%d", roleEnv, len(args)))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, in: in, more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.queue = append(p.queue, sc.Text())
			p.mu.Unlock()
			p.wake()
		}
		p.mu.Lock()
		p.eof, p.readErr = true, sc.Err()
		p.mu.Unlock()
		p.wake()
		io.Copy(io.Discard, out) // past an over-long line, so the child can still exit
		// Wait closes the pipe: only call it once every line has been read,
		// or a child's last words before exiting could be lost.
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *Proc) wake() {
	select {
	case p.more <- struct{}{}:
	default:
	}
}

// Line returns the child's next stdout line, failing the test after timeout.
func (p *Proc) Line(t testing.TB, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		if len(p.queue) > 0 {
			l := p.queue[0]
			p.queue = p.queue[1:]
			rest := len(p.queue)
			p.mu.Unlock()
			if rest > 0 {
				p.wake() // for another goroutine waiting in Line
			}
			return l
		}
		eof, readErr := p.eof, p.readErr
		p.mu.Unlock()
		switch {
		case eof && readErr != nil:
			t.Fatalf("child %d: reading its stdout: %v", p.Cmd.Process.Pid, readErr)
		case eof:
			t.Fatalf("child %d ended without a line", p.Cmd.Process.Pid)
		}
		select {
		case <-p.more:
		case <-deadline.C:
			t.Fatalf("child %d: no line within %v", p.Cmd.Process.Pid, timeout)
		}
	}
}

// Send writes one line to the child's stdin.
func (p *Proc) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		t.Fatalf("send to child: %v", err)
	}
}

// Wait waits for the child to exit and returns its error (nil for exit 0),
// failing the test after timeout.
func (p *Proc) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Cmd.Process.Kill()
		t.Fatalf("child %d did not exit within %v", p.Cmd.Process.Pid, timeout)
	}
	return nil
}

// Kill sends SIGKILL and waits for the child to be reaped.
func (p *Proc) Kill() {
	p.Cmd.Process.Kill()
	<-p.done
}

// In the child: Say writes a line to the parent, Hear reads one from it.
var stdin = bufio.NewReader(os.Stdin)

// Say writes one line to the parent (a child role's stdout).
func Say(format string, a ...any) { fmt.Fprintf(os.Stdout, format+"\n", a...) }

// Hear reads one line from the parent; it returns "" when the parent is gone.
func Hear() string {
	l, err := stdin.ReadString('\n')
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(l, "\n")
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
