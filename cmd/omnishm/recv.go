//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/jsonform"
)

func init() {
	register(command{
		name: "recv",
		usage: "--from F --to T --key K [--descriptor JSON] [--timeout DURATION] [--scope S] [--ring-bytes N]\n" +
			"       --transport nats [--url URL] --from F --to T --key K [--descriptor JSON] [--timeout DURATION]\n" +
			"       --config FILE [--connector NAME] --from F --to T --key K [--descriptor JSON] [--timeout DURATION]",
		summary:  "receive a payload as stage T and print its JSON form on one line (exit 1 on timeout)",
		examples: []string{"omnishm recv --scope demo --from 0 --to 1 --key req-1_0_0 --timeout 10s   # in a second shell"},
		run:      runRecv,
	})
}

func runRecv(ctx context.Context, args []string, inv *invocation) int {
	fs, e := declareEdgeFlags(inv, "host ring capacity of this end (as in the deployment's configuration); 0: per-key only",
		"timeout", 10*time.Second, "give up after this long")
	descText := fs.String("descriptor", "", "the descriptor send printed (JSON, plain or {key: descriptor}): read only that publication")
	if code, ok := e.parse(inv, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return inv.usageError("unexpected arguments %q", fs.Args())
	}
	var desc *connector.Descriptor
	if *descText != "" {
		var err error
		if desc, err = descriptor.Parse([]byte(*descText), *e.key); err != nil {
			return inv.usageError("--descriptor: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, err := e.open(inv, *e.to)
	if err != nil {
		return inv.fail(err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, *e.wait)
	defer cancel()
	payload, err := receive(rctx, conn, *e.from, *e.to, *e.key, desc)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(inv.err, "omnishm recv: interrupted")
		return exitInterrupted
	case errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("nothing received for key %q on edge %s->%s within %v", *e.key, *e.from, *e.to, *e.wait)
		if te, ok := errors.AsType[*connector.RecvTimeoutError](err); ok {
			msg += fmt.Sprintf(" (%s); saw %s", te.Where(), te.Saw())
		}
		return inv.fail(errors.New(msg))
	case err != nil:
		return inv.fail(err)
	}
	text, err := jsonform.Marshal(payload)
	if err != nil {
		return inv.fail(err)
	}
	fmt.Fprintf(inv.out, "%s\n", text)
	return exitOK
}

// receive blocks on the connector's wakeups (Recv) or, with a descriptor,
// polls Get for exactly that publication, until ctx ends.
func receive(ctx context.Context, conn connector.Receiver, from, to, key string, desc *connector.Descriptor) (any, error) {
	if desc == nil {
		v, _, err := conn.Recv(ctx, from, key)
		return v, err
	}
	backoff := 100 * time.Microsecond
	for {
		deadline, _ := ctx.Deadline()
		v, _, ok, err := conn.GetWithDeadline(from, to, key, desc, deadline)
		if err != nil || ok {
			return v, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, 10*time.Millisecond)
	}
}
