//go:build linux

package reexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const patience = 20 * time.Second

func TestMain(m *testing.M) {
	Register("echo", func(ctx context.Context, args []string) int {
		WriteLine("args=" + strings.Join(args, ","))
		WriteLine("env=" + os.Getenv(Env) + "," + os.Getenv("REEXEC_TEST_EXTRA"))
		l, err := ReadLine()
		WriteLine(fmt.Sprintf("got=%s,%v", l, err))
		return 0
	})
	Register("chatty", func(ctx context.Context, args []string) int {
		n, _ := strconv.Atoi(args[0])
		for i := range n {
			WriteLine(fmt.Sprintf("line %d", i))
		}
		return 0
	})
	// obedient stops when asked: its context ends on SIGINT.
	Register("obedient", func(ctx context.Context, args []string) int {
		WriteLine("ready")
		<-ctx.Done()
		return 3
	})
	// stubborn ignores being asked: only a kill ends it.
	Register("stubborn", func(ctx context.Context, args []string) int {
		signal.Ignore(os.Interrupt, syscall.SIGTERM)
		WriteLine("ready")
		time.Sleep(time.Hour) // until killed
		return 0
	})
	// parent starts an obedient child, says its pid and waits to be killed.
	Register("parent", func(ctx context.Context, args []string) int {
		c, err := Start("obedient", Options{Ready: "ready", Detach: args[0] == "detach"})
		if err != nil {
			WriteLine("error " + err.Error())
			return 1
		}
		WriteLine(strconv.Itoa(c.Pid()))
		<-ctx.Done()
		return 0
	})
	CheckUnknown()
	os.Exit(m.Run())
}

func line(t *testing.T, c *Child) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l, err := c.Line(ctx)
	if err != nil {
		t.Fatalf("child %d: %v", c.Pid(), err)
	}
	return l
}

func start(t *testing.T, role string, opts Options) *Child {
	t.Helper()
	c, err := Start(role, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Kill() })
	return c
}

func TestRoundTrip(t *testing.T) {
	c := start(t, "echo", Options{Args: []string{"a", "b c"}, Env: []string{"REEXEC_TEST_EXTRA=x"}})
	if got := line(t, c); got != "args=a,b c" {
		t.Fatalf("child saw %q", got)
	}
	// The role variable is not passed on to the role's own children.
	if got := line(t, c); got != "env=,x" {
		t.Fatalf("child environment: %q", got)
	}
	if err := c.Send("hello"); err != nil {
		t.Fatal(err)
	}
	if got := line(t, c); got != "got=hello,<nil>" {
		t.Fatalf("child echoed %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if l, err := c.Line(ctx); err != io.EOF {
		t.Fatalf("after the last line: %q, %v; want io.EOF", l, err)
	}
	if err := c.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestClosedInputIsEOF(t *testing.T) {
	c := start(t, "echo", Options{})
	line(t, c)
	line(t, c)
	c.CloseInput()
	if got := line(t, c); got != "got=,EOF" {
		t.Fatalf("child read %q from a closed stdin", got)
	}
}

func TestReady(t *testing.T) {
	c := start(t, "obedient", Options{Ready: "ready"})
	if c.Exited() {
		t.Fatal("ready child reported exited")
	}
	for _, opts := range []Options{
		{Ready: "something else"},
		{Ready: "ready", Exe: "/bin/true"},
	} {
		_, err := Start("obedient", opts)
		if !errors.Is(err, ErrNotReady) {
			t.Errorf("%+v: %v, want ErrNotReady", opts, err)
		}
	}
	if _, err := Start("obedient", Options{Exe: "/nonexistent/binary"}); err == nil {
		t.Error("started a missing executable")
	}
}

func TestUnknownRole(t *testing.T) {
	var out strings.Builder
	err := Command("no-such-role", Options{Stderr: &out}).Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out.String(), `no role "no-such-role"`) {
		t.Fatalf("unknown role: %v, %q", err, out.String())
	}
}

// TestUnreadLinesDoNotBlockTheChild: a child that writes more than any pipe
// or buffer holds, with nobody reading yet, still exits, and every line is
// there afterwards, in order.
func TestUnreadLinesDoNotBlockTheChild(t *testing.T) {
	const n = 20000 // ~200 KB: more than a pipe and any fixed line buffer
	c := start(t, "chatty", Options{Args: []string{strconv.Itoa(n)}})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := c.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got, want := line(t, c), fmt.Sprintf("line %d", i); got != want {
			t.Fatalf("line %d is %q, want %q", i, got, want)
		}
	}
}

func TestStop(t *testing.T) {
	c := start(t, "obedient", Options{Ready: "ready"})
	var exit *exec.ExitError
	if err := c.Stop(patience); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("asked to stop: %v, want exit status 3", err)
	}
	if !c.Exited() {
		t.Fatal("stopped child not exited")
	}
	c = start(t, "stubborn", Options{Ready: "ready"})
	err := c.Stop(10 * time.Millisecond)
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("stubborn child: %v, want killed", err)
	}
}
