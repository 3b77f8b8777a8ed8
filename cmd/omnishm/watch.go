//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"omnishm/shmstate"
)

// defaultWatchInterval is how often `inspect --watch` refreshes without an
// INTERVAL.
const defaultWatchInterval = time.Second

// watchFlag is --watch: a bool flag (so `--watch` alone works) that also
// takes a duration, as --watch=2s; `--watch 2s` is read after parsing.
type watchFlag struct {
	on       bool
	interval time.Duration
}

func (w *watchFlag) IsBoolFlag() bool { return true }

func (w *watchFlag) String() string {
	if w == nil || !w.on {
		return "false"
	}
	return w.interval.String()
}

func (w *watchFlag) Set(v string) error {
	if on, err := strconv.ParseBool(v); err == nil {
		w.on = on
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 500ms or 2s")
	}
	w.on, w.interval = true, d
	return nil
}

// ANSI sequences of the terminal view.
const (
	ansiHome       = "\x1b[H"
	ansiClearLine  = "\x1b[K"
	ansiClearBelow = "\x1b[J"
	ansiHideCursor = "\x1b[?25l"
	ansiShowCursor = "\x1b[?25h"
	ansiBold       = "\x1b[1m"
	ansiDead       = "\x1b[1;31m"
	ansiReset      = "\x1b[0m"
)

// watchState redraws the state every interval until ctx ends: in place on
// a terminal, else one plain snapshot after another. Rates come from a
// shmstate.Tracker comparing each scan with the one before.
func watchState(ctx context.Context, inv *invocation, opts shmstate.Options, interval time.Duration) int {
	tty := isTerminal(inv.out)
	if tty {
		io.WriteString(inv.out, ansiHideCursor)
		defer io.WriteString(inv.out, ansiShowCursor)
	}
	var tracker shmstate.Tracker
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		st, err := tracker.Scan(opts)
		if err != nil {
			return inv.fail(err)
		}
		var b bytes.Buffer
		printWatch(&b, st, interval, time.Now(), tty)
		if tty {
			// Overwrite in place, clearing what the last frame left: no flicker.
			frame := strings.ReplaceAll(b.String(), "\n", ansiClearLine+"\n")
			io.WriteString(inv.out, ansiHome+frame+ansiClearBelow)
		} else {
			b.WriteString("\n")
			inv.out.Write(b.Bytes())
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
		}
	}
}

// printWatch writes one frame: per scope, its edges with rates and its
// rings with occupancy bars (dead producers stand out), then the per-key
// files. tty adds colour.
func printWatch(w io.Writer, st *shmstate.State, interval time.Duration, now time.Time, tty bool) {
	title := fmt.Sprintf("omnishm inspect --watch %v   %s   uid %d", interval, now.Format("15:04:05"), st.UID)
	if tty {
		title = ansiBold + title + ansiReset
	}
	fmt.Fprintln(w, title)
	if len(st.Scopes) == 0 {
		fmt.Fprintf(w, "no ring or wake directories in %s\n", st.Dir)
	}
	for _, sc := range st.Scopes {
		name := strconv.Quote(sc.Name)
		if sc.Name == "" {
			name = "(scope string unknown)"
		}
		fmt.Fprintf(w, "scope %s  %s\n", name, sc.RingDir)
		edges := [][]string{{"EDGE", "RINGS", "READY", "USED/CAPACITY", "PUT/S", "CLAIM/S", "PUT B/S"}}
		var dead []bool
		for _, e := range sc.Edges() {
			puts, claims, bps := "-", "-", "-"
			if e.Active > 0 {
				approx := ""
				if e.Estimated {
					approx = "~"
				}
				puts = approx + strconv.FormatFloat(e.PutRate, 'f', 1, 64)
				claims = approx + strconv.FormatFloat(e.ClaimRate, 'f', 1, 64)
				bps = humanBytes(e.PutByteRate)
			}
			rings := strconv.Itoa(e.Rings)
			if e.Dead > 0 {
				rings += fmt.Sprintf(" (%d dead)", e.Dead)
			}
			edges = append(edges, []string{e.From + "->" + e.To, rings, strconv.Itoa(e.Ready),
				humanBytes(float64(e.Used)) + "/" + humanBytes(float64(e.Capacity)), puts, claims, bps})
			dead = append(dead, e.Dead > 0)
		}
		if len(edges) == 1 {
			fmt.Fprintln(w, "  no rings")
		} else {
			printTable(w, edges, dead, tty)
			rings := [][]string{{"RING", "EDGE", "PID", "PRODUCER", "OCCUPANCY", "READY", "DONE", "OLDEST READY"}}
			dead = dead[:0]
			for _, r := range sc.Rings {
				occ, ready, done, oldest := "busy (lock held)", "-", "-", "-"
				if !r.Busy {
					occ = bar(r.Used, r.Capacity, 20, tty)
					ready, done = strconv.Itoa(r.Ready), strconv.Itoa(r.Done)
					if r.Ready > 0 {
						oldest = r.OldestReady.String()
					}
				}
				if r.Error != "" {
					occ = "error: " + r.Error
				}
				producer := string(r.Producer)
				if r.Producer == shmstate.Dead {
					producer = "DEAD"
				}
				rings = append(rings, []string{shortRing(sc, r), r.From + "->" + r.To, strconv.Itoa(r.PID), producer, occ, ready, done, oldest})
				dead = append(dead, r.Producer == shmstate.Dead)
			}
			printTable(w, rings, dead, tty)
		}
		readerless := 0
		for _, f := range sc.FIFOs {
			if !f.Reader {
				readerless++
			}
		}
		fmt.Fprintf(w, "  markers without ring %d, FIFOs %d (without reader %d)\n", len(sc.MarkersWithoutRing), len(sc.FIFOs), readerless)
	}
	var segBytes int64
	var oldest shmstate.Age
	for _, s := range st.Segments {
		segBytes += s.Size
		oldest = max(oldest, s.Age)
	}
	orphans := st.Orphans()
	fmt.Fprintf(w, "per-key files: segments %d (%s, oldest %v), lock files %d (orphans %d)\n",
		len(st.Segments), humanBytes(float64(segBytes)), oldest, len(st.Locks), orphans.Locks)
}

// printTable aligns rows (the first is the header) on columns two spaces
// apart; on a terminal the header is bold and the rows marked in
// highlight (one per row after the header) are red.
func printTable(w io.Writer, rows [][]string, highlight []bool, tty bool) {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for n, r := range rows {
		var line strings.Builder
		line.WriteString("  ")
		for i, c := range r {
			line.WriteString(c)
			if i < len(r)-1 {
				line.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		s := line.String()
		switch {
		case tty && n == 0:
			s = ansiBold + s + ansiReset
		case tty && highlight[n-1]:
			s = ansiDead + s + ansiReset
		}
		fmt.Fprintln(w, s)
	}
}

// bar draws used/capacity as a bar of width cells and a percentage.
func bar(used, capacity uint64, width int, tty bool) string {
	full, empty := "#", "."
	if tty {
		full, empty = "█", "░"
	}
	frac := 0.0
	if capacity > 0 {
		frac = min(float64(used)/float64(capacity), 1)
	}
	n := int(frac*float64(width) + 0.5)
	if used > 0 && n == 0 {
		n = 1 // something is there: show it
	}
	return fmt.Sprintf("[%s%s] %3.0f%%", strings.Repeat(full, n), strings.Repeat(empty, width-n), frac*100)
}

// shortRing is a ring's name without its scope's directory prefix, its
// uuid cut to 8 digits: enough to tell rings apart on one screen.
func shortRing(sc shmstate.Scope, r shmstate.Ring) string {
	s := strings.TrimPrefix(r.Name, sc.RingDir+"_")
	if i := strings.LastIndexByte(s, '_'); i >= 0 && len(s)-i > 9 {
		s = s[:i+9]
	}
	return s
}

// humanBytes rounds a byte count or rate for a person: 512B, 1.5KiB, 4.0MiB.
func humanBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(n, 'f', 0, 64) + "B"
	}
	return strconv.FormatFloat(n, 'f', 1, 64) + units[i]
}
