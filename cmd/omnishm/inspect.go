//go:build linux

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"omnishm/shmstate"
)

func init() {
	register(command{
		name:     "inspect",
		usage:    "[--scope S | --all] [--key-prefix P] [--json | --watch [INTERVAL]]",
		summary:  "show this user's rings, markers, FIFOs, segments and lock files in /dev/shm (read-only)",
		examples: []string{"omnishm inspect --scope demo --watch 500ms"},
		run:      runInspect,
	})
}

// scopeFlags select scopes the same way for inspect and prune.
type scopeFlags struct {
	scopes    []string
	all       *bool
	keyPrefix *string
}

func declareScopeFlags(fs *flag.FlagSet) *scopeFlags {
	s := &scopeFlags{}
	fs.Func("scope", "only this wakeup scope (repeatable; \"\" is the no-scope names of this shell, keyed by the parent pid)", func(v string) error {
		s.scopes = append(s.scopes, v)
		return nil
	})
	s.all = fs.Bool("all", false, "every scope of this user (the default)")
	s.keyPrefix = fs.String("key-prefix", "", "only per-key segments and lock files whose key starts with this")
	return s
}

// options turns the flags into shmstate options, or a usage error.
func (s *scopeFlags) options(inv *invocation) (shmstate.Options, int, bool) {
	if *s.all && s.scopes != nil {
		return shmstate.Options{}, inv.usageError("--scope and --all exclude each other"), false
	}
	return shmstate.Options{Scopes: s.scopes, KeyPrefix: *s.keyPrefix}, exitOK, true
}

func runInspect(ctx context.Context, args []string, inv *invocation) int {
	fs := inv.flags()
	sel := declareScopeFlags(fs)
	asJSON := fs.Bool("json", false, "print the state as one JSON object (rings: producer alive or dead by start time,\n"+
		"capacity, bytes in use, ready and done frames; a ring whose lock is held is \"busy\", never waited on)")
	watch := &watchFlag{interval: defaultWatchInterval}
	fs.Var(watch, "watch", "redraw every INTERVAL (default 1s) until interrupted: edges with put and claim rates,\n"+
		"rings with occupancy bars, dead producers in red (plain snapshots when not a terminal)")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	if watch.on && fs.NArg() > 0 {
		// `--watch 2s`: a bool flag leaves its value to the arguments.
		if d, err := time.ParseDuration(fs.Arg(0)); err == nil {
			if d <= 0 {
				return inv.usageError("--watch %v: want a positive interval", d)
			}
			watch.interval = d
			if code, ok := inv.parse(fs, fs.Args()[1:]); !ok {
				return code
			}
		}
	}
	if fs.NArg() > 0 {
		return inv.usageError("unexpected arguments %q", fs.Args())
	}
	if watch.on && *asJSON {
		return inv.usageError("--watch and --json exclude each other")
	}
	opts, code, ok := sel.options(inv)
	if !ok {
		return code
	}
	if watch.on {
		return watchState(ctx, inv, opts, watch.interval)
	}
	st, err := shmstate.Scan(opts)
	if err != nil {
		return inv.fail(err)
	}
	if *asJSON {
		b, err := json.Marshal(st)
		if err != nil {
			return inv.fail(err)
		}
		fmt.Fprintf(inv.out, "%s\n", b)
		return exitOK
	}
	printState(inv.out, st)
	return exitOK
}

// printState writes the human view: one block per scope, then the
// uid-wide per-key files. Each table is aligned on its own.
func printState(w io.Writer, st *shmstate.State) {
	table := func(header string, rows [][]string) {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  "+header)
		for _, r := range rows {
			fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
		}
		tw.Flush()
	}
	if len(st.Scopes) == 0 {
		fmt.Fprintf(w, "no ring or wake directories of uid %d in %s\n", st.UID, st.Dir)
	}
	for _, sc := range st.Scopes {
		name := strconv.Quote(sc.Name)
		if sc.Name == "" {
			name = "(scope string unknown)"
		}
		fmt.Fprintf(w, "scope %s\n  ring dir %s (%s)\n", name, sc.RingDir, existence(sc.RingDirExists))
		if sc.WakeDir != "" {
			fmt.Fprintf(w, "  wake dir %s (%s)\n", sc.WakeDir, existence(sc.WakeDirExists))
		}
		var rows [][]string
		for _, r := range sc.Rings {
			used, ready, done := strconv.FormatUint(r.Used, 10), strconv.Itoa(r.Ready), strconv.Itoa(r.Done)
			if r.Busy {
				used, ready, done = "busy", "-", "-"
			}
			keys := strings.Join(r.ReadyKeys, ",")
			if r.Ready > len(r.ReadyKeys) {
				keys += ",..."
			}
			if r.Fault != "" {
				used, keys = "-", r.Fault+": "+r.Error
			} else if r.Error != "" {
				keys = "error: " + r.Error
			}
			rows = append(rows, []string{strings.TrimPrefix(r.Name, sc.RingDir+"_"), r.From + "->" + r.To,
				strconv.Itoa(r.PID), string(r.Producer), strconv.FormatUint(r.Capacity, 10), used, ready, done,
				yesNo(r.Marker), r.Age.String(), keys})
		}
		if len(rows) > 0 {
			table("RING\tEDGE\tPID\tPRODUCER\tCAPACITY\tUSED\tREADY\tDONE\tMARKER\tAGE\tREADY KEYS", rows)
		} else {
			fmt.Fprintln(w, "  no rings")
		}
		for _, m := range sc.MarkersWithoutRing {
			fmt.Fprintf(w, "  marker without ring: %s\n", m)
		}
		rows = rows[:0]
		for _, f := range sc.FIFOs {
			stage := f.Stage
			if stage == "" {
				stage = "- (temporary)"
			}
			rows = append(rows, []string{f.Name, stage, yesNo(f.Reader), f.Age.String()})
		}
		if len(rows) > 0 {
			table("FIFO\tSTAGE\tREADER\tAGE", rows)
		}
		for _, sl := range sc.Sleepers {
			if sl.Orphaned() {
				fmt.Fprintf(w, "  sleepers file without a read FIFO: %s\n", sl.Name)
			}
		}
	}
	fmt.Fprintf(w, "per-key files of uid %d (not tied to a scope)\n", st.UID)
	if len(st.Locks) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	sizes := map[string]int64{}
	for _, s := range st.Segments {
		sizes[s.Key] = s.Size
	}
	var rows [][]string
	for _, l := range st.Locks {
		size, lock := "-", "segment pending"
		switch {
		case l.Segment:
			size = strconv.FormatInt(sizes[l.Key], 10)
		case l.Orphan:
			lock = "orphan"
		default:
			lock = "no segment (young)"
		}
		rows = append(rows, []string{l.Key, size, lock, l.Age.String()})
	}
	table("KEY\tSEGMENT SIZE\tLOCK FILE\tAGE", rows)
}

func existence(ok bool) string {
	if ok {
		return "exists"
	}
	return "absent"
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}
