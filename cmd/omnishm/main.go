//go:build linux

// Command omnishm is the command-line face of the omnishm transport. Its
// subcommands:
//
//	encode   read a payload's JSON form and write its bytes (a frame or msgpack)
//	decode   read a payload's bytes and print its JSON form
//	send     publish a payload, print its descriptor, stay until it is claimed
//	recv     receive a payload as a stage and print its JSON form
//	inspect  show this user's rings, markers, FIFOs, segments and lock files in /dev/shm (--watch: a live view)
//	exporter serve that state as Prometheus metrics over HTTP
//	prune    remove this user's abandoned files in /dev/shm
//	bench    time put->get latency and rate per size and transport, against a Unix socket
//	demo     run a three-process audio pipeline over omnishm edges and report its figures
//
// send, recv and demo move payloads through /dev/shm (--transport shm, the
// default) or NATS JetStream (--transport nats, with --url), or as the
// shared YAML configuration of --config says; bench times both kinds. Over
// /dev/shm, send and recv meet only in one wakeup scope: --scope, else the
// environment's OMNISHM_SCOPE, else the configuration's wakeup_scope; with
// none, names are keyed by the parent pid and they warn, as two shells never
// share one.
//
// Usage:
//
//	omnishm COMMAND [flags] [args]
//	omnishm help [COMMAND]
//
// Payloads are read and printed in the JSON form of SPEC §10. The command
// only parses flags and prints: the work is done by the library packages
// (connector, shmstate, bench, demo and the codecs).
//
// Exit status: 0 on success, 1 when the command failed (bad input, I/O
// error), 2 for a usage error (unknown command, bad flag or arguments), 3
// when no receiver claimed what send published in time, 130 when send,
// recv, bench or demo was interrupted (SIGINT or SIGTERM).
//
// It builds on Linux only (build tag linux), as it needs the shared-memory packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"omnishm/internal/reexec"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// command is one subcommand of the dispatch table. Each lives in its own
// file and adds itself from an init function, so adding one never touches
// this file:
//
//	func init() {
//		register(command{name: "inspect", usage: "[-v] FILE",
//			summary: "print a ring file's frames",
//			examples: []string{"omnishm inspect -v ring.bin"}, run: runInspect})
//	}
//
//	func runInspect(ctx context.Context, args []string, inv *invocation) int {
//		fs := inv.flags()
//		verbose := fs.Bool("v", false, "print every frame")
//		if code, ok := inv.parse(fs, args); !ok {
//			return code
//		}
//		if fs.NArg() != 1 {
//			return inv.usageError("want one FILE")
//		}
//		...
//		if err != nil {
//			return inv.fail(err)
//		}
//		return exitOK
//	}
type command struct {
	name    string // as typed: "encode"
	usage   string // what follows the name in a usage line: "--as frame|msgpack [FILE|-]"
	summary string // one line for `omnishm help`
	// examples are command lines that --help ends with, one a line; every
	// command has at least one.
	examples []string
	// run executes the command with the arguments after its name and
	// returns the exit status; it reports its own errors through inv.
	run func(ctx context.Context, args []string, inv *invocation) int
}

// invocation is one run of a command: its standard streams (tests
// substitute their own) and the helpers every command reports through.
type invocation struct {
	cmd      command
	in       io.Reader
	out, err io.Writer
}

var commands = map[string]command{}

// register adds c to the dispatch table; it is called from init functions,
// so a bad or duplicate name is a programming error and panics.
func register(c command) {
	if c.name == "" || c.name == "help" || strings.HasPrefix(c.name, "-") || c.run == nil || len(c.examples) == 0 {
		panic(fmt.Sprintf("omnishm: bad command registration %q", c.name))
	}
	if _, dup := commands[c.name]; dup {
		panic(fmt.Sprintf("omnishm: command %q registered twice", c.name))
	}
	commands[c.name] = c
}

func main() {
	// A child process this binary started in a role (the watchdog, the
	// bench receiver, a demo stage) took it in an init function already.
	reexec.CheckUnknown()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args (without the program name) and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printHelp(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 1 {
			printHelp(stdout)
			return exitOK
		}
		// `help CMD` is `CMD --help`: the command declares its own flags.
		name, args = args[1], []string{name, "--help"}
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "omnishm: unknown command %q (run 'omnishm help' for the list)\n", name)
		return exitUsage
	}
	return c.run(ctx, args[1:], &invocation{cmd: c, in: stdin, out: stdout, err: stderr})
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "usage: omnishm COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	width := 0
	for n := range commands {
		names = append(names, n)
		width = max(width, len(n))
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'omnishm help COMMAND' or 'omnishm COMMAND --help' for its flags.")
}

// flags returns an empty flag set for the command. Declare the flags on it,
// then call parse.
func (inv *invocation) flags() *flag.FlagSet {
	fs := flag.NewFlagSet(inv.cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors itself, on one line
	fs.Usage = func() {}
	return fs
}

// parse parses args into fs. When ok is false the command must return code
// at once: --help printed the usage on stdout (0), or a bad flag was
// reported on stderr (2).
func (inv *invocation) parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return exitOK, true
	case errors.Is(err, flag.ErrHelp):
		inv.printUsage(fs)
		return exitOK, false
	default:
		return inv.usageError("%v", err), false
	}
}

func (inv *invocation) printUsage(fs *flag.FlagSet) {
	c := inv.cmd
	fmt.Fprintf(inv.out, "usage: omnishm %s %s\n\n%s\n", c.name, c.usage, c.summary)
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if has {
		fmt.Fprintln(inv.out, "\nflags:")
		fs.SetOutput(inv.out)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if len(c.examples) == 1 {
		fmt.Fprintln(inv.out, "\nexample:")
	} else {
		fmt.Fprintln(inv.out, "\nexamples:")
	}
	for _, e := range c.examples {
		fmt.Fprintf(inv.out, "  %s\n", e)
	}
}

// usageError reports a usage mistake on one line and returns exitUsage.
func (inv *invocation) usageError(format string, a ...any) int {
	name := inv.cmd.name
	fmt.Fprintf(inv.err, "omnishm %s: %s (see 'omnishm %s --help')\n", name, fmt.Sprintf(format, a...), name)
	return exitUsage
}

// fail reports err on one line and returns exitFail.
func (inv *invocation) fail(err error) int {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	fmt.Fprintf(inv.err, "omnishm %s: %s\n", inv.cmd.name, msg)
	return exitFail
}

// readInput reads all of the input named by a command's positional
// arguments: a file, or stdin when there is none or it is "-". The caller
// rejects more than one argument.
func (inv *invocation) readInput(args []string) ([]byte, error) {
	if len(args) == 0 || args[0] == "-" {
		b, err := io.ReadAll(inv.in)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return b, nil
	}
	return os.ReadFile(args[0]) // its error names the file
}
