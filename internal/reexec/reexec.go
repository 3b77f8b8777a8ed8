//go:build linux

// Package reexec runs a binary's own executable again as a child process in
// a named role: the watchdog, the bench receiver, the demo stages and the
// test harness's child roles all start this way.
//
// A role is registered with Register, from an init function (a library's
// role, which every binary that links the library can then serve) or at the
// top of main or TestMain. One environment variable, Env, names the role a
// child was started in; Register sees it and runs the role instead of the
// rest of the program. CheckUnknown, called once every role is registered,
// ends a child whose role nobody registered.
//
// The parent side is Start: the child's stdin and stdout are pipes carrying
// lines (optionally a ready line first), stdout is read as it comes and
// queued without bound, so a child never blocks on lines its parent has not
// read yet, and the child dies with its parent (Linux's parent-death signal)
// unless it is started detached. Child.Stop asks a child to stop (SIGINT and
// a closed stdin: the role's context ends) and kills it after a grace
// period. The child side is WriteLine and ReadLine.
//
// It builds on Linux only (build tag linux), as it needs the parent-death signal and waitid.
package reexec

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Env names the role of a re-executed child, and the pid of the parent it
// must die with: "name" or "name@pid". Register removes it from the child's
// environment before the role runs, so the role's own children do not
// inherit it.
const Env = "OMNISHM_ROLE"

// Role is the main function of a child role. args are the child's
// command-line arguments after the program name; ctx ends when the parent
// asks the child to stop (SIGINT or SIGTERM, as Child.Stop sends). The
// returned value is the process's exit status.
type Role func(ctx context.Context, args []string) int

var (
	mu    sync.Mutex
	roles = map[string]bool{}
)

// Register adds role name to this binary. When this process was started in
// that role, Register runs fn at once and exits the process with its
// status: it does not return. Names are non-empty and hold no '@' or '=';
// registering a bad name or one name twice is a programming error and
// panics.
func Register(name string, fn Role) {
	if name == "" || strings.ContainsAny(name, "@=") || fn == nil {
		panic(fmt.Sprintf("reexec: bad role registration %q", name))
	}
	mu.Lock()
	dup := roles[name]
	roles[name] = true
	mu.Unlock()
	if dup {
		panic(fmt.Sprintf("reexec: role %q registered twice", name))
	}
	role, parent, ok := current()
	if !ok || role != name {
		return
	}
	os.Unsetenv(Env)
	// The parent may have died between fork and the death signal being
	// armed: then nobody would stop this child.
	if parent != 0 && os.Getppid() != parent {
		fmt.Fprintf(os.Stderr, "%s: parent %d gone before the child started\n", name, parent)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Register runs in a package's init, whose goroutine the runtime keeps
	// locked to the main OS thread: a role run on it would switch OS
	// threads at every wakeup of its own. It runs on a goroutine of its own.
	exit := make(chan int)
	go func() { exit <- fn(ctx, os.Args[1:]) }()
	code := <-exit
	stop()
	os.Exit(code)
}

// CheckUnknown exits with status 2 when this process was started in a role
// that no Register call took (this binary does not have it). Call it once
// every role is registered: at the top of main, or in TestMain after the
// test roles.
func CheckUnknown() {
	if role, _, ok := current(); ok {
		fmt.Fprintf(os.Stderr, "reexec: this binary has no role %q\n", role)
		os.Exit(2)
	}
}

// current reads Env: the role this process was started in and the parent
// it dies with (0: a detached child).
func current() (role string, parent int, ok bool) {
	v, ok := os.LookupEnv(Env)
	if !ok || v == "" {
		return "", 0, false
	}
	role, pid, found := strings.Cut(v, "@")
	if found {
		parent, _ = strconv.Atoi(pid)
	}
	return role, parent, true
}

// The child's end of the line protocol.
var (
	outMu  sync.Mutex
	outBuf []byte
	stdin  = sync.OnceValue(func() *LineReader { return NewLineReader(os.Stdin) })
)

// WriteLine writes line and a newline to this process's stdout in one
// write: a child's message to its parent. Safe for concurrent use: lines
// never interleave.
func WriteLine(line string) error {
	outMu.Lock()
	defer outMu.Unlock()
	outBuf = append(append(outBuf[:0], line...), '\n')
	_, err := os.Stdout.Write(outBuf)
	return err
}

// ReadLine returns the next line from this process's stdin, without its
// newline: a message from the parent. It returns io.EOF once the parent has
// closed its end or died; a last line without a newline was cut short and
// is not returned. Not safe for concurrent use.
func ReadLine() (string, error) { return stdin().ReadLine() }

// LineReader reads the parent's lines from a reader of its own, for a role
// that reads its stdin in some other way than as it comes (the watchdog
// reads it lazily). Not safe for concurrent use.
type LineReader struct{ r *bufio.Reader }

// NewLineReader reads lines from r.
func NewLineReader(r io.Reader) *LineReader { return &LineReader{bufio.NewReader(r)} }

// ReadLine is the package's ReadLine, from l's reader.
func (l *LineReader) ReadLine() (string, error) {
	line, err := l.r.ReadString('\n')
	if err != nil {
		return "", err // io.EOF, also after a cut-short last line
	}
	return strings.TrimSuffix(line, "\n"), nil
}
