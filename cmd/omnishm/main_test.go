//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"strings"
	"testing"

	"omnishm/internal/reexec"
	"omnishm/internal/shmtest"
)

// cliRole makes the test binary run the command line instead of the
// tests, so tests drive the real program as a child process without
// building it.
const cliRole = "omnishm-cli"

func TestMain(m *testing.M) {
	// As main does: SIGINT and SIGTERM cancel the command's context.
	reexec.Register(cliRole, func(ctx context.Context, args []string) int {
		return run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	})
	shmtest.Main(m, nil)
}

// cliOptions starts `omnishm args...` in a child. Under -race a child would
// sleep 1 s at exit (atexit_sleep_ms): skip it.
func cliOptions(args []string) reexec.Options {
	return reexec.Options{Args: args, Env: []string{"GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"}}
}

// result is what one run of the command line produced.
type result struct {
	stdout, stderr []byte
	code           int
}

// omnishm runs `omnishm args...` as a child process with stdin as its
// input. Tests of every subcommand use it.
func omnishm(t *testing.T, stdin []byte, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	opts := cliOptions(args)
	opts.Stderr = &errOut
	cmd := reexec.Command(cliRole, opts)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout = &out
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("omnishm %v: %v", args, err)
	}
	return result{out.Bytes(), errOut.Bytes(), code}
}

// wantFailure checks a failed run: the status, and one line on stderr that
// mentions msg.
func (r result) wantFailure(t *testing.T, code int, msg string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit status %d, want %d (stderr %q)", r.code, code, r.stderr)
	}
	errText := string(r.stderr)
	if strings.Count(errText, "\n") != 1 || !strings.HasSuffix(errText, "\n") {
		t.Errorf("stderr is not one line: %q", errText)
	}
	if !strings.Contains(errText, msg) {
		t.Errorf("stderr %q does not mention %q", errText, msg)
	}
	if !strings.HasPrefix(errText, "omnishm") {
		t.Errorf("stderr %q does not start with the program name", errText)
	}
}

func (r result) wantSuccess(t *testing.T) {
	t.Helper()
	if r.code != 0 || len(r.stderr) != 0 {
		t.Fatalf("exit status %d, stderr %q", r.code, r.stderr)
	}
}

func TestHelp(t *testing.T) {
	r := omnishm(t, nil, "help")
	r.wantSuccess(t)
	for _, name := range []string{"encode", "decode"} {
		if !strings.Contains(string(r.stdout), "  "+name+" ") {
			t.Errorf("help does not list %s:\n%s", name, r.stdout)
		}
	}
	for _, args := range [][]string{{"help", "encode"}, {"encode", "--help"}, {"encode", "-h"}} {
		r := omnishm(t, nil, args...)
		r.wantSuccess(t)
		if !strings.HasPrefix(string(r.stdout), "usage: omnishm encode [--as auto|frame|msgpack]") ||
			!strings.Contains(string(r.stdout), "-as string") {
			t.Errorf("%v printed:\n%s", args, r.stdout)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"encode", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"encode", "--as", "json"}, `--as "json"`},
		{[]string{"encode", "--as", "frame", "a", "b"}, "at most one input file"},
		{[]string{"decode", "--as", "cbor"}, `--as "cbor"`},
		{[]string{"decode", "a", "b"}, "at most one input file"},
		{[]string{"decode", "--as"}, "flag needs an argument"},
		{[]string{"demo", "--requests", "0"}, "--requests 0: want 1..10000"},
		{[]string{"demo", "--chunks", "x"}, `invalid value "x" for flag -chunks`},
		{[]string{"demo", "--ring-bytes", "100"}, "--ring-bytes 100: want 0 or 4096..67108864"},
		{[]string{"demo", "--requests", "10000", "--chunks", "1000000"}, "want at most 10000000"},
		{[]string{"demo", "--interval", "-1s"}, "--interval -1s"},
		{[]string{"demo", "now"}, "unexpected arguments now"},
		{[]string{"bench", "--mode", "burst"}, `--mode "burst"`},
		{[]string{"bench", "--sizes", "3"}, "multiple of 4"},
		{[]string{"bench", "--sizes", "4,x"}, `bad size: "x"`},
		{[]string{"bench", "--transports", "ring,ring"}, `"ring" given twice`},
		{[]string{"bench", "--transports", "tcp"}, `unknown transport "tcp"`},
		{[]string{"bench", "--ring-bytes", "0"}, "--ring-bytes 0"},
		{[]string{"bench", "--plot", "x.pdf"}, "must end in .svg or .png"},
		{[]string{"bench", "--sizes", "512", "--payload", "x.json"}, "exclude each other"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			omnishm(t, nil, c.args...).wantFailure(t, exitUsage, c.msg)
		})
	}
	r := omnishm(t, nil)
	if r.code != exitUsage || !strings.Contains(string(r.stderr), "usage: omnishm COMMAND") {
		t.Errorf("no arguments: status %d, stderr %q", r.code, r.stderr)
	}
}

// Every subcommand's --help ends with its examples, each a command line of
// that subcommand.
func TestHelpEndsWithExamples(t *testing.T) {
	for name, c := range commands {
		var out bytes.Buffer
		inv := &invocation{cmd: c, out: &out, err: &out}
		inv.printUsage(inv.flags())
		text := strings.TrimRight(out.String(), "\n")
		i := strings.LastIndex(text, "\nexample")
		if i < 0 || len(c.examples) == 0 {
			t.Errorf("%s --help has no example:\n%s", name, text)
			continue
		}
		for _, l := range strings.Split(text[i:], "\n")[2:] {
			if !strings.Contains(l, "omnishm "+name) {
				t.Errorf("%s --help example %q is not a %s command line", name, l, name)
			}
		}
	}
}

// The package doc (what `go doc ./cmd/omnishm` prints) lists every
// subcommand, and nothing promised for later.
func TestDocListsCommands(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	for name := range commands {
		if !strings.Contains(doc, "\t"+name+" ") && !strings.Contains(doc, "\t"+name+"\t") {
			t.Errorf("the package doc does not list %s:\n%s", name, doc)
		}
	}
	if strings.Contains(doc, "later") {
		t.Errorf("the package doc promises something for later:\n%s", doc)
	}
}
