//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"omnishm/shmstate"
)

// pruneFIFOGrace spares a wakeup FIFO a receiver has just created and not
// yet opened (SPEC §8: it opens its FIFO right after mkfifo).
const pruneFIFOGrace = 2 * time.Second

func init() {
	register(command{
		name:     "prune",
		usage:    "[--scope S | --all] [--key-prefix P] [--dry-run] [--older-than DURATION]",
		summary:  "remove this user's abandoned files: dead producers' rings, orphan locks, idle FIFOs",
		examples: []string{"omnishm prune --all --dry-run"},
		run:      runPrune,
	})
}

func runPrune(ctx context.Context, args []string, inv *invocation) int {
	fs := inv.flags()
	sel := declareScopeFlags(fs)
	dry := fs.Bool("dry-run", false, "list what would be removed, remove nothing (every removal is listed: rings and\n"+
		"markers of dead producers, markers without rings, orphan lock files, FIFOs without a\n"+
		"reader, empty scope directories)")
	olderThan := fs.Duration("older-than", 0, "also remove per-key segments not written for this long, if no one holds their lock\n"+
		"(0s: every such segment; without the flag: none)")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return inv.usageError("unexpected arguments %q", fs.Args())
	}
	if *olderThan < 0 {
		return inv.usageError("--older-than %v: want a duration of 0s or more", *olderThan)
	}
	segmentsOlderThan := time.Duration(0) // shmstate: zero leaves every segment alone
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "older-than" {
			// No value may silently mean "never": 0s is "written before
			// now", the smallest age shmstate takes as a limit.
			segmentsOlderThan = max(*olderThan, time.Nanosecond)
		}
	})
	opts, code, ok := sel.options(inv)
	if !ok {
		return code
	}
	rep, err := shmstate.Prune(shmstate.PruneOptions{Options: opts, DryRun: *dry, SegmentsOlderThan: segmentsOlderThan, FIFOGrace: pruneFIFOGrace})
	verb := "removed"
	if *dry {
		verb = "would remove"
	}
	for _, r := range rep.Removed {
		fmt.Fprintf(inv.out, "%s %s %s (%s)\n", verb, r.What, r.Path, r.Reason)
	}
	for _, r := range rep.Skipped {
		fmt.Fprintf(inv.out, "kept %s %s (%s)\n", r.What, r.Path, r.Reason)
	}
	if err != nil {
		return inv.fail(err)
	}
	return exitOK
}
