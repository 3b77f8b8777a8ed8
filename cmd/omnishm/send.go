package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"omnishm/connector"
	"omnishm/jsonform"
	"omnishm/ring"
)

// exitUnclaimed is send's status when no receiver claimed the payload in time.
const exitUnclaimed = 3

// exitInterrupted is the conventional status after SIGINT (128 + 2).
const exitInterrupted = 130

func init() {
	register(command{
		name:    "send",
		usage:   "--scope S --from F --to T --key K [--ring-bytes N] [--wait DURATION] [FILE|-]",
		summary: "publish a payload (JSON form), print its descriptor, stay until it is claimed (exit 0)",
		run:     runSend,
	})
}

// edgeFlags are the flags send and recv share.
type edgeFlags struct {
	scope, from, to, key *string
	ringBytes            *int
}

func declareEdgeFlags(inv *invocation, ringHelp string) (*flag.FlagSet, edgeFlags) {
	fs := inv.flags()
	e := edgeFlags{
		scope:     fs.String("scope", "", "wakeup scope shared by both ends (default: none, names keyed by the parent pid)"),
		from:      fs.String("from", "", "producer stage id (required)"),
		to:        fs.String("to", "", "receiver stage id (required)"),
		key:       fs.String("key", "", "publication key (required)"),
		ringBytes: fs.Int("ring-bytes", ring.DefaultCapacity, ringHelp),
	}
	return fs, e
}

// check reports the first missing required flag.
func (e edgeFlags) check(inv *invocation) (int, bool) {
	for _, f := range []struct{ name, v string }{{"from", *e.from}, {"to", *e.to}, {"key", *e.key}} {
		if f.v == "" {
			return inv.usageError("--%s is required", f.name), false
		}
	}
	if ring.CheckCapacity(*e.ringBytes) != nil {
		return inv.usageError("--ring-bytes %d: want 0 (per-key only) or 4096..67108864", *e.ringBytes), false
	}
	return exitOK, true
}

// open opens a connector for stage, configured from the flags.
func (e edgeFlags) open(stage string) (*connector.SHM, error) {
	return connector.Open(connector.Options{
		StageID:       connector.Stage(stage),
		WakeupScope:   *e.scope,
		HostRingBytes: connector.RingBytes(*e.ringBytes), // --ring-bytes 0: per-key only
	})
}

func runSend(ctx context.Context, args []string, inv *invocation) int {
	fs, e := declareEdgeFlags(inv, "host ring capacity; 0 forces the per-key path")
	wait := fs.Duration("wait", 30*time.Second, "if no receiver claims the payload within this time, retire it and exit 3\n(SIGINT or SIGTERM retire it and exit 130)")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	if code, ok := e.check(inv); !ok {
		return code
	}
	if *wait <= 0 {
		return inv.usageError("--wait %v: want a positive duration", *wait)
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
	conn, err := e.open("")
	if err != nil {
		return inv.fail(err)
	}
	defer conn.Close()
	_, desc, err := conn.Put(*e.from, *e.to, *e.key, payload)
	if err != nil {
		return inv.fail(err)
	}
	fmt.Fprintln(inv.out, desc.String())

	// WaitClaimed sleeps between cheap checks (no lock, no busy loop): the
	// frames must outlive the put until claimed.
	wctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	err = conn.WaitClaimed(wctx, desc)
	switch {
	case err == nil:
		return exitOK
	case ctx.Err() != nil:
		conn.Cleanup(*e.key)
		fmt.Fprintf(inv.err, "omnishm send: interrupted; publication of %q retired\n", *e.key)
		return exitInterrupted
	case wctx.Err() != nil:
		// Cleanup retires nothing if a receiver claimed it meanwhile.
		if !conn.Cleanup(*e.key) {
			return exitOK
		}
		fmt.Fprintf(inv.err, "omnishm send: no receiver claimed %q within %v; publication retired\n", *e.key, *wait)
		return exitUnclaimed
	}
	conn.Cleanup(*e.key)
	return inv.fail(err)
}
