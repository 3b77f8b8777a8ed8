//go:build linux

package reexec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotReady is returned by Start when the child did not print its ready
// line in time: it failed, or the executable does not have the role (a
// binary other than this one, say).
var ErrNotReady = errors.New("reexec: no ready line from the child")

// DefaultReadyTimeout bounds the wait for a ready line when
// Options.ReadyTimeout is zero.
const DefaultReadyTimeout = 10 * time.Second

// maxLine bounds one line of a child's stdout.
const maxLine = 64 << 20

// Options shape a child. The zero value runs this executable with no
// arguments, dying with this process.
type Options struct {
	Args []string // the role's arguments
	// Env holds "KEY=value" entries added to this process's environment.
	Env []string
	// Exe is the executable to run; empty means this one (on Linux
	// /proc/self/exe, which holds even if the file was replaced since).
	Exe string
	// Argv0 is the child's program name (what ps shows); empty means this
	// process's.
	Argv0      string
	Dir        string     // working directory; empty means this one's
	ExtraFiles []*os.File // the child's descriptors 3, 4, ...
	Stderr     io.Writer  // nil means this process's stderr
	// Detach starts the child in a session of its own, without the
	// parent-death signal: it outlives this process and signals to this
	// process group do not reach it (the watchdog, which cleans up after a
	// dead owner).
	Detach bool
	// Ready, when set, is the line Start waits for before it returns (a
	// handshake: the child runs the role and is set up).
	Ready        string
	ReadyTimeout time.Duration // 0 means DefaultReadyTimeout
	// Credential, when set, runs the child as that user and groups (only
	// root may give another user's): what another user's process meets.
	Credential *syscall.Credential
}

// Command returns the unstarted command that runs opts.Exe in role, for a
// caller that handles the child's standard streams itself (Ready and
// ReadyTimeout are Start's). Unless opts.Detach, the child gets the
// parent-death signal and exits at once if this process died before the
// signal was armed.
func Command(role string, opts Options) *exec.Cmd {
	exe := opts.Exe
	if exe == "" {
		exe = selfExe()
	}
	cmd := exec.Command(exe, opts.Args...)
	cmd.Args[0] = os.Args[0]
	if opts.Argv0 != "" {
		cmd.Args[0] = opts.Argv0
	}
	value := role
	if !opts.Detach {
		value += "@" + strconv.Itoa(os.Getpid())
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, Env+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, opts.Env...), Env+"="+value)
	cmd.Dir = opts.Dir
	cmd.ExtraFiles = opts.ExtraFiles
	cmd.Stderr = opts.Stderr
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	cmd.SysProcAttr = sysProcAttr(opts.Detach)
	cmd.SysProcAttr.Credential = opts.Credential
	return cmd
}

// Child is a running child role as its parent sees it: lines to its stdin,
// lines from its stdout, its exit. Safe for concurrent use.
type Child struct {
	cmd *exec.Cmd
	in  io.WriteCloser

	mu      sync.Mutex
	queue   []string // stdout lines not yet taken by Line
	eof     bool
	readErr error         // why stdout stopped being read as lines, if not EOF
	more    chan struct{} // holds a token when a line was queued or stdout ended
	done    chan struct{} // closed once the child is reaped
	err     error         // its exit status, valid after done
}

// Start runs opts.Exe in role with stdin and stdout pipes. With
// opts.Ready set it returns once the child printed that line, or kills the
// child and returns an error wrapping ErrNotReady.
func Start(role string, opts Options) (*Child, error) {
	cmd := Command(role, opts)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("reexec: start %s as %s: %w", cmd.Path, role, err)
	}
	c := &Child{cmd: cmd, in: in, more: make(chan struct{}, 1), done: make(chan struct{})}
	go c.read(out)
	if opts.Ready == "" {
		return c, nil
	}
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	line, err := c.Line(ctx)
	if err != nil || line != opts.Ready {
		c.Kill()
		return nil, fmt.Errorf("%w (%s as %s: %q, %v)", ErrNotReady, cmd.Path, role, line, err)
	}
	return c, nil
}

// read queues the child's stdout lines as they come, then reaps it.
func (c *Child) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, maxLine)
	for sc.Scan() {
		c.mu.Lock()
		c.queue = append(c.queue, sc.Text())
		c.mu.Unlock()
		c.wake()
	}
	c.mu.Lock()
	c.eof, c.readErr = true, sc.Err()
	c.mu.Unlock()
	c.wake()
	io.Copy(io.Discard, out) // past an over-long line, so the child can still exit
	// Wait closes the pipe: only call it once every line has been read, or
	// a child's last words before exiting could be lost.
	c.err = c.cmd.Wait()
	close(c.done)
}

func (c *Child) wake() {
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Cmd is the child's command, for reading only (its ProcessState once Done
// is closed).
func (c *Child) Cmd() *exec.Cmd { return c.cmd }

// Write writes p to the child's stdin as it is: lines end in '\n'.
func (c *Child) Write(p []byte) (int, error) { return c.in.Write(p) }

// Send writes one line, and its newline, to the child's stdin.
func (c *Child) Send(line string) error {
	_, err := io.WriteString(c.in, line+"\n")
	return err
}

// CloseInput closes the child's stdin: it reads end of file.
func (c *Child) CloseInput() error { return c.in.Close() }

// Line returns the child's next stdout line, without its newline. It
// returns io.EOF after the last line, the read error if stdout stopped
// being readable as lines (a line over 64 MiB), or ctx's error.
func (c *Child) Line(ctx context.Context) (string, error) {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			l := c.queue[0]
			c.queue[0] = ""
			c.queue = c.queue[1:]
			rest := len(c.queue)
			c.mu.Unlock()
			if rest > 0 {
				c.wake() // for another goroutine waiting in Line
			}
			return l, nil
		}
		eof, readErr := c.eof, c.readErr
		c.mu.Unlock()
		if eof {
			c.wake() // end of file is for every waiter
			if readErr != nil {
				return "", fmt.Errorf("reexec: reading the child's stdout: %w", readErr)
			}
			return "", io.EOF
		}
		select {
		case <-c.more:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// Done is closed once the child has exited and been reaped, after its last
// stdout line was queued.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is the child's exit status as exec.Cmd.Wait reports it (nil for
// status 0); valid once Done is closed.
func (c *Child) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Wait waits until the child is reaped and returns its exit status, or
// returns ctx's error first (the child keeps running).
func (c *Child) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited reports whether the child has ended, reaped or not: on Linux it
// looks without reaping (waitid WNOWAIT), so Wait still collects the
// status; elsewhere it reports only a reaped child.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return exited(c.cmd.Process.Pid)
	}
}

// Stop ends the child and waits until it is reaped: it asks first (SIGINT,
// which ends the role's context, and a closed stdin), and kills it after
// grace. It returns the exit status; a child that exited already is left
// as it is.
func (c *Child) Stop(grace time.Duration) error {
	select {
	case <-c.done:
		return c.err
	default:
	}
	c.cmd.Process.Signal(os.Interrupt)
	c.in.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.cmd.Process.Kill()
		<-c.done
	}
	return c.err
}

// Kill sends SIGKILL and waits until the child is reaped.
func (c *Child) Kill() {
	c.cmd.Process.Kill()
	<-c.done
}
