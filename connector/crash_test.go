//go:build linux

package connector_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

// Crash cleanup: what a producer or receiver killed by SIGKILL leaves in
// /dev/shm once its watchdog has run (SPEC §9). Nothing: not its rings and
// their markers, not its pending segments and their lock files, not the
// segment it was writing, not its FIFO, not the directories it made.

// rolePending: scope ringBytes prefix n size. Opens stage 0 and stage 1
// (a receiver with its FIFO) of scope, puts n payloads of size bytes under
// prefix_0 .. prefix_{n-1} on edge 0->1, says "put", and waits to be killed.
func rolePending(args []string) int {
	ringBytes, _ := strconv.Atoi(args[1])
	n, _ := strconv.Atoi(args[3])
	size, _ := strconv.Atoi(args[4])
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "0", HostRingBytes: ringBytes})
	if err != nil {
		return childFailed(err)
	}
	r, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "1", HostRingBytes: ringBytes})
	if err != nil {
		return childFailed(err)
	}
	defer r.Close()
	for i := range n {
		if _, _, err := c.Put("0", "1", fmt.Sprintf("%s_%d", args[2], i), make([]byte, size)); err != nil {
			return childFailed(err)
		}
	}
	shmtest.Say("put")
	shmtest.Hear()
	return 0
}

func childFailed(err error) int {
	fmt.Fprintln(os.Stderr, "child:", err)
	return 1
}

// scopeFiles lists what is in /dev/shm of names and of keys starting with
// prefix.
func scopeFiles(names scope.Names, prefix string) []string { return conntest.Files(names, prefix) }

func TestKilledProcessLeavesNothing(t *testing.T) {
	for _, c := range []struct {
		name      string
		ringBytes int
		n, size   int
	}{
		{"ring", ring.DefaultCapacity, 20, 100},
		{"ring-and-segments", ring.MinCapacity, 50, 2000}, // the ring fills: most go per-key
		{"per-key", connector.NoRing, 50, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := shmtest.Scope(t)
			names := scope.New(s)
			prefix := shmtest.Key("killed")
			p := shmtest.Start(t, "pending", s, strconv.Itoa(c.ringBytes), prefix, strconv.Itoa(c.n), strconv.Itoa(c.size))
			if l := p.Line(t, wait); l != "put" {
				t.Fatal(l)
			}
			if len(scopeFiles(names, prefix)) == 0 {
				t.Fatal("the child made no files")
			}
			p.Kill()
			shmtest.Eventually(t, wait, "the killed process's files to be removed", func() bool {
				return len(scopeFiles(names, prefix)) == 0
			})
		})
	}
}

// roleFlood: scope ringBytes prefix size. Puts payloads of size bytes under
// prefix_0, prefix_1, ... on edge 0->1 until killed, saying "putting" once
// the first is published.
func roleFlood(args []string) int {
	ringBytes, _ := strconv.Atoi(args[1])
	size, _ := strconv.Atoi(args[3])
	c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: "0", HostRingBytes: ringBytes})
	if err != nil {
		return childFailed(err)
	}
	payload := make([]byte, size)
	for i := 0; ; i++ {
		if _, _, err := c.Put("0", "1", fmt.Sprintf("%s_%d", args[2], i), payload); err != nil {
			return childFailed(err)
		}
		if i == 0 {
			shmtest.Say("putting")
		}
	}
}

// A producer killed while it writes segments, at whatever point of a put
// the kill lands, leaves nothing: not the segment it was writing, nor any
// lock file. (Before the watchdog learned names before their files, one
// payload-sized segment stayed behind in most of these kills.)
func TestProducerKilledMidPutLeavesNothing(t *testing.T) {
	for i := range 8 {
		s := shmtest.Scope(t)
		names := scope.New(s)
		prefix := shmtest.Key("midput")
		p := shmtest.Start(t, "flood", s, strconv.Itoa(connector.NoRing), prefix, strconv.Itoa(4<<20))
		if l := p.Line(t, wait); l != "putting" {
			t.Fatal(l)
		}
		// Let it get some way into later puts: the kill lands wherever it is.
		shmtest.Eventually(t, wait, "a few more puts", func() bool {
			return len(scopeFiles(names, prefix)) >= 2*(1+i%4)
		})
		p.Kill()
		shmtest.Eventually(t, wait, "the killed producer's files to be removed", func() bool {
			return len(scopeFiles(names, prefix)) == 0
		})
	}
}

// The watchdog is told of the FIFOs this process reads, its receivers' own,
// never of another receiver's that this process only writes to.
func TestOnlyOwnFIFOsAreTracked(t *testing.T) {
	s := shmtest.Scope(t)
	names := scope.New(s)
	other := shmtest.Start(t, "recv", s, shmtest.Key("never"), "1h")
	if l := other.Line(t, wait); l != "waiting" {
		t.Fatal(l)
	}
	theirs, _ := filepath.Glob(names.WakeDir + "/1_*")
	if len(theirs) != 1 {
		t.Fatalf("the other receiver's FIFOs: %v", theirs)
	}
	// As a producer's Notifier does.
	fd, err := unix.Open(theirs[0], unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if got := connector.ReceiverFIFOs(names.WakeDir); len(got) != 0 {
		t.Fatalf("FIFOs read by this process: %v, want none", got)
	}
	conntest.Open(t, s, "1", connector.NoRing)
	all, _ := filepath.Glob(names.WakeDir + "/1_*")
	got := connector.ReceiverFIFOs(names.WakeDir)
	if len(all) != 2 || len(got) != 1 || got[0] == theirs[0] || !slices.Contains(all, got[0]) {
		t.Fatalf("FIFOs read by this process: %v; all: %v; the other's: %v", got, all, theirs)
	}
	// A receiver that never put anything has a watchdog too, for its FIFO.
	other.Kill()
	shmtest.Eventually(t, wait, "the killed receiver's FIFO to be removed", func() bool {
		_, err := os.Lstat(theirs[0])
		return os.IsNotExist(err)
	})
}
