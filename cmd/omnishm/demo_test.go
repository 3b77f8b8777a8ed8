//go:build linux

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// demoCrashEnv names a demo stage that kills itself once the pipeline
// starts (a test hook of package demo).
const demoCrashEnv = "OMNISHM_DEMO_CRASH"

// buildOmnishm builds the real binary once per test that needs it.
func buildOmnishm(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "omnishm")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var scopeLine = regexp.MustCompile(`\(scope (omnishm-demo-([0-9a-f]{16}))\)`)

// demoLeftovers lists /dev/shm entries of a demo run, found from its scope.
func demoLeftovers(t *testing.T, sc, id string) []string {
	t.Helper()
	names := scope.New(sc)
	entries, err := os.ReadDir(scope.ShmDir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		n := e.Name()
		if n == filepath.Base(names.WakeDir) || n == names.RingDirName || strings.HasPrefix(n, names.RingPrefix()) ||
			strings.Contains(n, "demo-"+id+"-") {
			left = append(left, n)
		}
	}
	return left
}

func TestDemoRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs four processes")
	}
	bin := buildOmnishm(t)
	for _, c := range []struct {
		ring             string
		requests, chunks int
	}{
		{"4194304", 2, 4}, {"4096", 2, 4}, {"0", 2, 4},
		{"4194304", 1, 1}, // the smallest run: one chunk is also the last
	} {
		ring, requests, chunks := c.ring, c.requests, c.chunks
		t.Run(fmt.Sprintf("ring=%s/%dx%d", ring, requests, chunks), func(t *testing.T) {
			out := t.TempDir()
			cmd := exec.Command(bin, "demo", "--requests", strconv.Itoa(requests), "--chunks", strconv.Itoa(chunks),
				"--ring-bytes", ring, "--out", out)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			m := scopeLine.FindStringSubmatch(stdout.String())
			if m == nil {
				t.Fatalf("no scope in the report:\n%s", stdout.String())
			}
			if left := demoLeftovers(t, m[1], m[2]); len(left) > 0 {
				t.Fatalf("left in /dev/shm: %v", left)
			}
			// Their contents are checked by package demo's tests.
			for r := range requests {
				if _, err := os.Stat(filepath.Join(out, "demo-"+m[2]+"-r"+strconv.Itoa(r)+".wav")); err != nil {
					t.Fatal(err)
				}
			}
			if files, _ := filepath.Glob(filepath.Join(out, "*.wav")); len(files) != requests {
				t.Fatalf("wav files %v, want %d", files, requests)
			}
			for _, want := range []string{"requests/s", "p50", "p99", "stage 0", "stage 1", "stage 2", "/dev/shm          clean"} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, stdout.String())
				}
			}
		})
	}
}

// stagePIDs reads the demo's "stages running as pids A B C (scope S)" line.
func stagePIDs(t *testing.T, line string) (pids []int, sc, id string) {
	t.Helper()
	f := regexp.MustCompile(`pids (\d+) (\d+) (\d+)`).FindStringSubmatch(line)
	m := scopeLine.FindStringSubmatch(line)
	if f == nil || m == nil {
		t.Fatalf("no pids in %q", line)
	}
	for _, s := range f[1:] {
		pid, _ := strconv.Atoi(s)
		pids = append(pids, pid)
	}
	return pids, m[1], m[2]
}

func TestDemoStopsStagesWhenOneDies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs four processes")
	}
	bin := buildOmnishm(t)
	cmd := exec.Command(bin, "demo", "--requests", "2", "--chunks", "100000", "--out", t.TempDir())
	cmd.Env = append(os.Environ(), demoCrashEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitFail {
		t.Fatalf("demo with a crashing stage: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "stage 1 ended early") {
		t.Fatalf("stderr does not name the failed stage:\n%s", stderr.String())
	}
	pids, sc, id := stagePIDs(t, stderr.String())
	for _, pid := range pids {
		if shmtest.Running(pid) {
			t.Errorf("stage pid %d still running", pid)
		}
	}
	if left := demoLeftovers(t, sc, id); len(left) > 0 {
		t.Fatalf("left in /dev/shm: %v", left)
	}
}

func TestDemoStagesDieWithParent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs four processes")
	}
	bin := buildOmnishm(t)
	cmd := exec.Command(bin, "demo", "--requests", "2", "--chunks", "1000000", "--out", t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("no pid line: %v", err)
	}
	go io.Copy(io.Discard, stderr)
	pids, sc, id := stagePIDs(t, line)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	shmtest.Eventually(t, 20*time.Second, "stages to die with the parent", func() bool {
		for _, pid := range pids {
			if shmtest.Running(pid) {
				return false
			}
		}
		return true
	})
	// Stages killed by SIGKILL cannot clean up after themselves; remove what
	// the run left so the test leaves nothing behind.
	for _, n := range demoLeftovers(t, sc, id) {
		os.RemoveAll(filepath.Join(scope.ShmDir, n))
	}
}

// TestDemoInterrupted: SIGINT to the parent mid-stream (as Ctrl-C would
// deliver, or a supervisor to the parent alone) stops every stage, which
// cleans up after itself: the run exits 130 and nothing needed sweeping.
func TestDemoInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs four processes")
	}
	bin := buildOmnishm(t)
	// Flat out, and paced: stage 0 waiting out its interval stops at once too.
	for _, interval := range []string{"0", "1m"} {
		t.Run("interval="+interval, func(t *testing.T) { demoInterrupt(t, bin, interval) })
	}
}

func demoInterrupt(t *testing.T, bin, interval string) {
	cmd := exec.Command(bin, "demo", "--requests", "2", "--chunks", "1000000", "--interval", interval, "--out", t.TempDir())
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The pid line, then the first progress bar ("\r[...] N/M chunks"):
	// the stages are streaming.
	type head struct {
		line string
		err  error
	}
	got := make(chan head, 1)
	stderr := bufio.NewReader(stderrPipe)
	go func() {
		line, err := stderr.ReadString('\n')
		if err == nil {
			_, err = stderr.ReadString('\r')
		}
		if err == nil {
			_, err = stderr.ReadString('\r')
		}
		got <- head{line, err}
	}()
	var h head
	select {
	case h = <-got:
	case <-time.After(shmtest.Patience):
		t.Fatal("no progress from the demo")
	}
	if h.err != nil {
		t.Fatalf("demo stderr: %v", h.err)
	}
	pids, sc, id := stagePIDs(t, h.line)
	cmd.Process.Signal(os.Interrupt)
	rest, _ := io.ReadAll(stderr)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitInterrupted {
		t.Fatalf("interrupted demo: %v, want exit %d\nstderr:\n%s", err, exitInterrupted, rest)
	}
	if !strings.Contains(string(rest), "omnishm demo: interrupted") || strings.Contains(string(rest), "left") {
		t.Fatalf("stderr does not say interrupted, or says something was left:\n%s", rest)
	}
	for _, pid := range pids {
		if shmtest.Running(pid) {
			t.Errorf("stage pid %d still running", pid)
		}
	}
	if left := demoLeftovers(t, sc, id); len(left) > 0 {
		t.Fatalf("left in /dev/shm: %v", left)
	}
}
