//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/jsonform"
	"omnishm/natsconn"
	"omnishm/ring"
)

// scopeEnv is read by send and recv for the wakeup scope when --scope is
// not given.
const scopeEnv = "OMNISHM_SCOPE"

// exitUnclaimed is send's status when no receiver claimed the payload in time.
const exitUnclaimed = 3

// exitInterrupted is the conventional status after SIGINT (128 + 2).
const exitInterrupted = 130

func init() {
	register(command{
		name: "send",
		usage: "--from F --to T --key K [--scope S] [--ring-bytes N] [--wait DURATION] [FILE|-]\n" +
			"       --transport nats [--url URL] --from F --to T --key K [--wait DURATION] [FILE|-]\n" +
			"       --config FILE [--connector NAME] --from F --to T --key K [--wait DURATION] [FILE|-]",
		summary:  "publish a payload (JSON form), print its descriptor, stay until it is claimed (exit 0)",
		examples: []string{`echo '{"n": 1}' | omnishm send --scope demo --from 0 --to 1 --key req-1_0_0 -   # waits for recv's claim`},
		run:      runSend,
	})
}

// edgeFlags are the flags send and recv share.
type edgeFlags struct {
	scope, from, to, key *string
	ringBytes            *int
	transport            transportFlags
	wait                 *time.Duration // how long this end waits for the other
	waitName             string
	chosen               config.Connector // check's: what open opens
	noScope              bool             // check's: no scope was chosen, names are keyed by the parent pid
}

// declareEdgeFlags declares the shared flags, the end's own wait among them
// (waitName: recv's --timeout, send's --wait).
func declareEdgeFlags(inv *invocation, ringHelp, waitName string, wait time.Duration, waitHelp string) (*flag.FlagSet, *edgeFlags) {
	fs := inv.flags()
	e := &edgeFlags{
		scope: fs.String("scope", "", "wakeup scope shared by both ends (default: $"+scopeEnv+", else the configuration's, else none:\n"+
			"names keyed by the parent pid, which two shells do not share) (shm only)"),
		from:      fs.String("from", "", "producer stage id (required)"),
		to:        fs.String("to", "", "receiver stage id (required)"),
		key:       fs.String("key", "", "publication key (required)"),
		ringBytes: fs.Int("ring-bytes", ring.DefaultCapacity, ringHelp+" (shm only)"),
		transport: declareTransportFlags(fs, true, "default: the configuration's, else "+natsconn.DefaultURL),
		wait:      fs.Duration(waitName, wait, waitHelp),
		waitName:  waitName,
	}
	return fs, e
}

// parse parses args, reports the first missing required flag, bad value or
// flag that does not go with the transport, and settles the connector
// configuration.
func (e *edgeFlags) parse(inv *invocation, fs *flag.FlagSet, args []string) (int, bool) {
	if code, ok := inv.parse(fs, args); !ok {
		return code, false
	}
	for _, f := range []struct{ name, v string }{{"from", *e.from}, {"to", *e.to}, {"key", *e.key}} {
		if f.v == "" {
			return inv.usageError("--%s is required", f.name), false
		}
	}
	if ring.CheckCapacity(*e.ringBytes) != nil {
		return inv.usageError("--ring-bytes %d: want 0 (per-key only) or 4096..67108864", *e.ringBytes), false
	}
	set := flagsSet(fs)
	c, code, ok := e.transport.chosen(inv, set)
	if !ok {
		return code, false
	}
	for _, f := range []string{"scope", "ring-bytes"} {
		if set[f] && c.Name != config.SharedMemoryConnector {
			return inv.usageError("--%s is for --transport %s", f, transportSHM), false
		}
	}
	switch env := os.Getenv(scopeEnv); {
	case c.Name != config.SharedMemoryConnector:
	case set["scope"]:
		c.Extra.WakeupScope = *e.scope
	case env != "":
		c.Extra.WakeupScope = env
	case c.Extra.WakeupScope == "":
		e.noScope = true
	}
	if set["ring-bytes"] {
		c.Extra.HostRingBytes = *e.ringBytes // 0: per-key only
	}
	if *e.wait <= 0 {
		return inv.usageError("--%s %v: want a positive duration", e.waitName, *e.wait), false
	}
	e.chosen = c
	return exitOK, true
}

// open opens a connector for stage, configured from the flags. Without a
// scope it warns first: the names of no scope are keyed by the parent pid
// (SPEC §2), so two shells never meet there, and nothing else would say so.
func (e *edgeFlags) open(inv *invocation, stage string) (connector.Receiver, error) {
	if e.noScope {
		fmt.Fprintf(inv.err, "omnishm %s: no --scope, %s or wakeup_scope: names are keyed by the parent pid %d, "+
			"so only processes of that parent meet here; give both ends --scope NAME (or export %s=NAME)\n",
			inv.cmd.name, scopeEnv, os.Getppid(), scopeEnv)
	}
	return openEndpoint(e.chosen, stage)
}

func runSend(ctx context.Context, args []string, inv *invocation) int {
	fs, e := declareEdgeFlags(inv, "host ring capacity; 0 forces the per-key path", "wait", 30*time.Second,
		"if no receiver claims the payload within this time, retire it and exit 3\n(SIGINT or SIGTERM retire it and exit 130)")
	if code, ok := e.parse(inv, fs, args); !ok {
		return code
	}
	if fs.NArg() > 1 {
		return inv.usageError("want at most one payload file, got %d arguments", fs.NArg())
	}
	text, err := inv.readInput(fs.Args())
	if err != nil {
		return inv.fail(err)
	}
	payload, err := jsonform.Unmarshal(text)
	if err != nil {
		return inv.fail(fmt.Errorf("payload: %w", err))
	}
	// Retire on SIGINT/SIGTERM whoever runs us (main does this too).
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The sender receives nothing: no stage id, so no wakeup FIFO of its own.
	conn, err := e.open(inv, "")
	if err != nil {
		return inv.fail(err)
	}
	defer conn.Close()
	teller, ok := conn.(connector.ClaimWaiter)
	if !ok {
		return inv.fail(fmt.Errorf("%T cannot tell when its publication is claimed", conn))
	}
	_, desc, err := conn.Put(*e.from, *e.to, *e.key, payload)
	if err != nil {
		return inv.fail(err)
	}
	fmt.Fprintln(inv.out, desc.String())

	// The publication must outlive the put until it is claimed.
	wctx, cancel := context.WithTimeout(ctx, *e.wait)
	defer cancel()
	err = teller.WaitClaimed(wctx, desc)
	if err == nil {
		return exitOK
	}
	// Not claimed in time (or the wait failed): retire it, unless a
	// receiver claimed it meanwhile.
	retired := conn.Cleanup(*e.key)
	if !retired {
		if ok, _ := teller.Claimed(desc); ok {
			return exitOK
		}
	}
	what := "publication retired"
	if !retired {
		what = "it could not be retired (it expires unclaimed)"
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(inv.err, "omnishm send: interrupted; %s (key %q)\n", what, *e.key)
		return exitInterrupted
	case wctx.Err() != nil:
		fmt.Fprintf(inv.err, "omnishm send: no receiver claimed %q within %v; %s\n", *e.key, *e.wait, what)
		return exitUnclaimed
	}
	return inv.fail(err)
}
