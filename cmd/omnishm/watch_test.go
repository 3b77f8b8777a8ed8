//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/internal/reexec"
	"omnishm/internal/shmtest"
)

// openPTY opens a pseudo-terminal pair: what a terminal emulator holds
// (master) and what a program's stdout is (slave). x/sys/unix has the three
// calls it takes; a pty package would add a dependency for them.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	master = os.NewFile(uintptr(m), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil { // unlockpt
		master.Close()
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN) // ptsname
	if err != nil {
		master.Close()
		t.Fatal(err)
	}
	s, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		t.Fatal(err)
	}
	return master, os.NewFile(uintptr(s), "pty")
}

// screen accumulates what a child writes, for waiting on what it shows.
type screen struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	more chan struct{} // a token after each write
	done chan struct{} // closed once the writer is gone
}

func newScreen() *screen { return &screen{more: make(chan struct{}, 1), done: make(chan struct{})} }

func (s *screen) Write(b []byte) (int, error) {
	s.mu.Lock()
	s.buf.Write(b)
	s.mu.Unlock()
	select {
	case s.more <- struct{}{}:
	default:
	}
	return len(b), nil
}

func (s *screen) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor returns the text once re matches it, after what a previous match
// ended at (from), failing the test after patience.
func (s *screen) waitFor(t *testing.T, re *regexp.Regexp, from int) (string, int) {
	t.Helper()
	deadline := time.NewTimer(patience)
	defer deadline.Stop()
	for {
		text := s.text()
		if loc := re.FindStringIndex(text[from:]); loc != nil {
			return text, from + loc[1]
		}
		select {
		case <-s.more:
		case <-s.done:
			if text := s.text(); !re.MatchString(text[from:]) {
				t.Fatalf("the output ended without %v:\n%s", re, text[from:])
			}
		case <-deadline.C:
			t.Fatalf("no %v within %v in:\n%s", re, patience, text[from:])
		}
	}
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// The watch view on a terminal redraws in place and shows the count of an
// edge's rings and ready frames change as producers come; a killed
// producer's ring is drawn in red; SIGINT ends it with status 0 and the
// cursor shown again.
func TestInspectWatchInPseudoTerminal(t *testing.T) {
	s := opsScope(t)
	sweepAfterKills(t, s)
	first, desc := startRingSender(t, s, shmtest.Key("watch"))

	master, slave := openPTY(t)
	defer master.Close()
	out := newScreen()
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil { // EIO once the child has closed the terminal
				close(out.done)
				return
			}
		}
	}()
	var stderr bytes.Buffer
	cmd := reexec.Command(cliRole, cliOptions([]string{"inspect", "--watch", "20ms", "--scope", s, "--key-prefix", shmtest.Prefix()}))
	cmd.Stdout, cmd.Stderr = slave, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})

	edge := func(rings, ready int) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`(?m)^  0->1\s+%d\s+%d\s`, rings, ready))
	}
	// Waited on in the text without escapes: the view's rows as a person
	// reads them.
	stripped := func(re *regexp.Regexp, from int) int {
		t.Helper()
		deadline := time.Now().Add(patience)
		for {
			text, _ := out.waitFor(t, regexp.MustCompile(`\x1b\[J`), from) // a whole frame
			plain := ansi.ReplaceAllString(text[from:], "")
			if re.MatchString(plain) {
				return len(text)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %v within %v in:\n%s", re, patience, plain)
			}
			from = len(text)
		}
	}
	at := stripped(edge(1, 1), 0)
	second, _ := startRingSender(t, s, shmtest.Key("watch"))
	at = stripped(edge(2, 2), at)

	// The first producer killed: the copy of its ring is a dead producer's,
	// its row drawn in red.
	dead := deadCopy(t, s, first, desc.HostRing.Name)
	short := strings.TrimPrefix(dead, strings.Split(dead, "_0_1_")[0]+"_")
	short = short[:strings.LastIndexByte(short, '_')+9]
	out.waitFor(t, regexp.MustCompile(regexp.QuoteMeta(ansiDead+"  "+short)+`[^\n]*DEAD`), at)

	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("watch after SIGINT: %v; stderr %q", waitErr, stderr.String())
		}
	case <-time.After(patience):
		t.Fatal("watch did not stop on SIGINT")
	}
	<-out.done
	if text := out.text(); !strings.HasPrefix(text, ansiHideCursor) || !strings.HasSuffix(text, ansiShowCursor) {
		t.Errorf("the view does not hide and then show the cursor: %q ... %q", text[:min(len(text), 20)], text[max(0, len(text)-20):])
	}
	second.signal(syscall.SIGTERM)
	second.wait(t)
}

// Without a terminal the view prints plain snapshots, one after another.
func TestInspectWatchPlain(t *testing.T) {
	s := opsScope(t)
	w := startCLI(t, nil, "inspect", "--watch=20ms", "--scope", s, "--key-prefix", shmtest.Prefix())
	var lines []string
	for titles := 0; titles < 2; { // two snapshots: a title line each
		l := w.line(t)
		lines = append(lines, l)
		if strings.HasPrefix(l, "omnishm inspect --watch 20ms") {
			titles++
		}
	}
	w.signal(syscall.SIGINT)
	if code := w.wait(t); code != 0 {
		t.Fatalf("status %d, stderr %q", code, w.errText())
	}
	if text := strings.Join(lines, "\n"); strings.Contains(text, "\x1b") || !strings.Contains(text, "no rings") {
		t.Fatalf("plain output:\n%q", text)
	}
}

func TestInspectWatchUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"inspect", "--watch", "--json"}, "--watch and --json exclude each other"},
		{[]string{"inspect", "--watch=soon"}, "want a positive duration"},
		{[]string{"inspect", "--watch", "0s"}, "--watch 0s: want a positive interval"},
		{[]string{"inspect", "--watch", "2s", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"inspect", "later"}, `unexpected arguments ["later"]`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			omnishm(t, nil, c.args...).wantFailure(t, exitUsage, c.msg)
		})
	}
}
