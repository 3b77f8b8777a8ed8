package main

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"omnishm/internal/shmtest"
)

// TestPeerSeesDeath: the liveness check stage readers use says a process
// is alive until it exits, through a pidfd and through the start-time
// fallback.
func TestPeerSeesDeath(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep(1):", err)
	}
	pid := cmd.Process.Pid
	viaFD, err := watchPeer(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer viaFD.close()
	start, err := startTime(pid)
	if err != nil || start == "" {
		t.Fatalf("start time: %q %v", start, err)
	}
	viaStart := &peer{pid: pid, fd: -1, start: start}
	if !viaFD.alive() || !viaStart.alive() {
		t.Fatal("a running process reported dead")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if viaFD.alive() || viaStart.alive() {
		t.Fatal("a dead process reported alive")
	}
	// A live pid whose start time differs is a reused pid: not our peer.
	if (&peer{pid: os.Getpid(), fd: -1, start: "1"}).alive() {
		t.Fatal("a reused pid reported as the peer")
	}
}

// TestChildExited: a child that has ended is seen without being reaped, so
// exec.Cmd.Wait still collects its status.
func TestChildExited(t *testing.T) {
	cmd := exec.Command("sh", "-c", "read x; exit 3")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skip("no sh:", err)
	}
	if childExited(cmd.Process.Pid) {
		t.Fatal("a running child reported ended")
	}
	in.Close()
	shmtest.Eventually(t, 10*time.Second, "the child to end", func() bool { return childExited(cmd.Process.Pid) })
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Wait after childExited: %v, want exit status 3", err)
	}
	if !childExited(cmd.Process.Pid) {
		t.Fatal("a reaped child reported running")
	}
}
