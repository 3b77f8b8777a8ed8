//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/reexec"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/shmstate"
)

// inspectScope runs `inspect --scope s --json` and returns that scope.
func inspectScope(t *testing.T, s string) shmstate.Scope {
	t.Helper()
	r := omnishm(t, nil, "inspect", "--scope", s, "--key-prefix", shmtest.Prefix(), "--json")
	r.wantSuccess(t)
	var st shmstate.State
	if err := json.Unmarshal(r.stdout, &st); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
	}
	if len(st.Scopes) != 1 || st.Scopes[0].Name != s || st.Scopes[0].RingDir != scope.New(s).RingDirName {
		t.Fatalf("inspect --scope %s shows %+v", s, st.Scopes)
	}
	return st.Scopes[0]
}

func findRing(sc shmstate.Scope, name string) (shmstate.Ring, bool) {
	for _, r := range sc.Rings {
		if r.Name == name {
			return r, true
		}
	}
	return shmstate.Ring{}, false
}

// startRingSender starts `send` on edge 0->1 of scope s and returns it with
// the ring its frame went to.
func startRingSender(t *testing.T, s, key string) (*cliProc, *connector.Descriptor) {
	t.Helper()
	send := startCLI(t, []byte(`{"n": 7, "t": {"$tensor": {"dtype": "float32", "shape": [2], "data": "AACAPwAAAEA="}}}`),
		"send", "--scope", s, "--from", "0", "--to", "1", "--key", key)
	desc, err := descriptor.Parse([]byte(send.line(t)), key)
	if err != nil || desc.HostRing == nil {
		t.Fatalf("send descriptor %v, %v: want a ring frame", desc, err)
	}
	return send, desc
}

// deadCopy kills a ring producer by SIGKILL after copying its ring file,
// and once the producer's crash watchdog has finished, publishes the copy
// with a marker under another name of the same pid: a real producer's ring,
// proven dead, that no watchdog removes before the test looks (a watchdog
// prunes the dead rings of its scope, SPEC §9).
func deadCopy(t *testing.T, s string, producer *cliProc, ringName string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(scope.ShmDir, ringName))
	if err != nil {
		t.Fatal(err)
	}
	watchdogs := shmtest.Children(producer.Cmd.Process.Pid)
	producer.Cmd.Process.Kill()
	producer.wait(t)
	shmtest.Eventually(t, 20*time.Second, "the killed producer's watchdog to finish", func() bool {
		return !slices.ContainsFunc(watchdogs, shmtest.Running)
	})
	n := scope.New(s)
	if err := os.MkdirAll(n.RingDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	name := n.EdgePrefix("0", "1") + strconv.Itoa(producer.Cmd.Process.Pid) + "_00000000000000000000000000dead01"
	path := filepath.Join(scope.ShmDir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.RingDir(), name), nil, 0o600); err != nil {
		os.Remove(path)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(path)
		os.Remove(filepath.Join(n.RingDir(), name))
	})
	return name
}

func TestInspectLiveAndDeadRings(t *testing.T) {
	s := opsScope(t)
	sweepAfterKills(t, s)
	key := shmtest.Key("inspect")
	send, desc := startRingSender(t, s, key)

	sc := inspectScope(t, s)
	live, ok := findRing(sc, desc.HostRing.Name)
	if !ok {
		t.Fatalf("ring %s not shown: %+v", desc.HostRing.Name, sc)
	}
	if live.Producer != shmstate.Alive || live.Busy || live.Ready != 1 || live.Done != 0 || !slices.Equal(live.ReadyKeys, []string{key}) ||
		!live.Marker || live.From != "0" || live.To != "1" || live.PID != send.Cmd.Process.Pid ||
		live.Capacity != ring.DefaultCapacity || live.Used == 0 || live.Error != "" {
		t.Errorf("live ring = %+v", live)
	}
	human := omnishm(t, nil, "inspect", "--scope", s)
	human.wantSuccess(t)
	for _, want := range []string{strconv.Quote(s), "alive", key, "0->1", "RING"} {
		if !strings.Contains(string(human.stdout), want) {
			t.Errorf("inspect output lacks %q:\n%s", want, human.stdout)
		}
	}

	dead := deadCopy(t, s, send, desc.HostRing.Name)
	sc = inspectScope(t, s)
	r, ok := findRing(sc, dead)
	if !ok || r.Producer != shmstate.Dead || r.Ready != 1 || !slices.Equal(r.ReadyKeys, []string{key}) || !r.Marker {
		t.Errorf("dead producer's ring = %+v (found %v)", r, ok)
	}
	// The producer's own ring: gone (its watchdog unlinked it) or dead.
	if orig, ok := findRing(sc, desc.HostRing.Name); ok && orig.Producer != shmstate.Dead {
		t.Errorf("killed producer's ring = %+v", orig)
	}
	if r := omnishm(t, nil, "prune", "--scope", s, "--key-prefix", shmtest.Prefix()); r.code != 0 {
		t.Fatalf("prune: %d %s", r.code, r.stderr)
	}
	if sc := inspectScope(t, s); len(sc.Rings) != 0 || len(sc.MarkersWithoutRing) != 0 || sc.RingDirExists {
		t.Errorf("after prune: %+v", sc)
	}
}

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
	deadline := time.NewTimer(shmtest.Patience)
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
			t.Fatalf("no %v within %v in:\n%s", re, shmtest.Patience, text[from:])
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
		deadline := time.Now().Add(shmtest.Patience)
		for {
			text, _ := out.waitFor(t, regexp.MustCompile(`\x1b\[J`), from) // a whole frame
			plain := ansi.ReplaceAllString(text[from:], "")
			if re.MatchString(plain) {
				return len(text)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %v within %v in:\n%s", re, shmtest.Patience, plain)
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
	case <-time.After(shmtest.Patience):
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

// prunedPaths returns the paths of the "removed ..." (or "would remove
// ...") lines of prune's output.
func prunedPaths(t *testing.T, out []byte, verb string) []string {
	t.Helper()
	var paths []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		rest, ok := strings.CutPrefix(line, verb+" ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			t.Fatalf("prune line %q", line)
		}
		paths = append(paths, f[1])
	}
	slices.Sort(paths)
	return paths
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestPruneRemovesOnlyTheDead(t *testing.T) {
	s := opsScope(t)
	sweepAfterKills(t, s)
	n := scope.New(s)
	liveKey, deadKey := shmtest.Key("live"), shmtest.Key("dead")
	live, liveDesc := startRingSender(t, s, liveKey)
	doomed, doomedDesc := startRingSender(t, s, deadKey)
	dead := deadCopy(t, s, doomed, doomedDesc.HostRing.Name)

	orphan := filepath.Join(scope.ShmDir, "shm_"+shmtest.Key("orphan")+"_lockfile.lock")
	young := filepath.Join(scope.ShmDir, "shm_"+shmtest.Key("young")+"_lockfile.lock")
	for _, p := range []string{orphan, young} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}
	// The young lock file is a put in progress: its producer (this test)
	// has it open. One open nowhere would go at once.
	inUse, err := os.Open(young)
	if err != nil {
		t.Fatal(err)
	}
	defer inUse.Close()

	mustGo := []string{filepath.Join(scope.ShmDir, dead), filepath.Join(n.RingDir(), dead), orphan}
	mayGo := append(slices.Clone(mustGo), // the killed producer's own ring, unless its watchdog was first
		filepath.Join(scope.ShmDir, doomedDesc.HostRing.Name), filepath.Join(n.RingDir(), doomedDesc.HostRing.Name))
	mustStay := []string{filepath.Join(scope.ShmDir, liveDesc.HostRing.Name), filepath.Join(n.RingDir(), liveDesc.HostRing.Name), young}

	check := func(paths []string) {
		t.Helper()
		for _, p := range mustGo {
			if !slices.Contains(paths, p) {
				t.Errorf("prune did not list %s: %v", p, paths)
			}
		}
		for _, p := range paths {
			if !slices.Contains(mayGo, p) {
				t.Errorf("prune listed %s, which is not a dead producer's or an orphan", p)
			}
		}
	}
	dry := omnishm(t, nil, "prune", "--scope", s, "--key-prefix", shmtest.Prefix(), "--dry-run")
	if dry.code != 0 {
		t.Fatalf("prune --dry-run: %d %s", dry.code, dry.stderr)
	}
	check(prunedPaths(t, dry.stdout, "would remove"))
	for _, p := range mustGo {
		if !exists(p) {
			t.Errorf("dry run removed %s", p)
		}
	}

	r := omnishm(t, nil, "prune", "--scope", s, "--key-prefix", shmtest.Prefix())
	if r.code != 0 {
		t.Fatalf("prune: %d %s", r.code, r.stderr)
	}
	check(prunedPaths(t, r.stdout, "removed"))
	for _, p := range mayGo {
		if exists(p) {
			t.Errorf("%s survived prune", p)
		}
	}
	for _, p := range mustStay {
		if !exists(p) {
			t.Errorf("prune removed %s", p)
		}
	}
	// The live producer's ring still works.
	got := omnishm(t, nil, "recv", "--scope", s, "--from", "0", "--to", "1", "--key", liveKey)
	got.wantSuccess(t)
	if !strings.Contains(string(got.stdout), `"n":7`) {
		t.Errorf("recv after prune: %s", got.stdout)
	}
	if code := live.wait(t); code != 0 {
		t.Errorf("live send exited %d: %s", code, live.errText())
	}
}

// --older-than has no value that silently means never: without the flag no
// segment is removed, with 0s every unlocked one is, and a negative age is
// a usage error.
func TestPruneOlderThan(t *testing.T) {
	s := opsScope(t)
	hourOld := time.Now().Add(-time.Hour)
	cases := []struct {
		args    []string
		removed []bool // of the fresh segment, the one written an hour ago
	}{
		{nil, []bool{false, false}},
		{[]string{"--older-than", "2h"}, []bool{false, false}},
		{[]string{"--older-than", "30m"}, []bool{false, true}},
		{[]string{"--older-than", "0s"}, []bool{true, true}},
	}
	for _, c := range cases {
		t.Run(strings.Join(append([]string{"flags"}, c.args...), " "), func(t *testing.T) {
			var files [][]string
			for _, mtime := range []time.Time{time.Now(), hourOld} {
				key := shmtest.Key("aged")
				kf := shmtest.KeyFiles(scope.ShmDir, key)
				t.Cleanup(func() { os.Remove(kf[0]); os.Remove(kf[1]) })
				shmtest.WriteFile(t, kf[1], nil)
				shmtest.WriteFileAt(t, kf[0], []byte("\xa5payload"), mtime)
				files = append(files, kf)
			}
			args := append([]string{"prune", "--scope", s, "--key-prefix", shmtest.Prefix()}, c.args...)
			r := omnishm(t, nil, args...)
			r.wantSuccess(t)
			for i, kf := range files {
				if c.removed[i] {
					shmtest.AssertAbsent(t, kf...)
				} else {
					shmtest.AssertPresent(t, kf...)
				}
			}
		})
	}
	if r := omnishm(t, nil, "prune", "--scope", s, "--older-than", "-1ns"); r.code != exitUsage {
		t.Fatalf("--older-than -1ns: exit %d, want a usage error", r.code)
	}
}
