package demo

import (
	"os"
	"os/exec"
	"testing"
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
