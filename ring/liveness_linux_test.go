package ring

import (
	"encoding/json"
	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/scope"
	"os"
	"strings"
	"testing"
)

// Tests of producer liveness (SPEC §7): a dead producer's frames are never
// delivered, and what it left is pruned.

// roleProducer: args scope, key, value. Puts, prints the descriptor, then
// obeys one command: "exit" (without Close), "close", or waits to be killed.
func roleProducer(args []string) int {
	tr, err := New(Options{Names: scope.New(args[0]), Capacity: 4096})
	if err != nil {
		return 1
	}
	d, ok, err := putBytes(tr, "0", "1", args[1], []byte(args[2]))
	if !ok || err != nil {
		return 1
	}
	b, _ := json.Marshal(d)
	shmtest.Say("%s", b)
	switch shmtest.Hear() {
	case "close":
		tr.Close()
	case "exit":
		os.Exit(0)
	}
	return 0
}

func TestDeadProducerFramesNeverDelivered(t *testing.T) {
	for _, how := range []string{"exit", "kill"} {
		t.Run(how, func(t *testing.T) {
			sc := shmtest.Scope(t)
			r := newTransport(t, sc, 4096)
			child := shmtest.Start(t, "producer", sc, "restart", "11")
			var old descriptor.RingHandle
			if err := json.Unmarshal([]byte(child.Line(t, shmtest.Patience)), &old); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { // in case the receiver did not prune them
				os.Remove(scope.ShmDir + "/" + old.Name)
				os.Remove(scope.New(sc).RingDir() + "/" + old.Name)
				os.Remove(scope.New(sc).RingDir())
			})
			// Attach the live ring (and index its frame) without claiming.
			mustMiss(t, r, "0", "1", "not-published", nil)
			if len(r.readerFDs()) != 1 {
				t.Fatal("ring not attached")
			}
			if how == "exit" {
				child.Send(t, "exit")
				child.Exited(t, shmtest.Patience)
			} else {
				child.Kill()
			}
			mustMiss(t, r, "0", "1", "restart", &old)
			mustMiss(t, r, "0", "1", "restart", nil)
			if n := len(r.readerFDs()); n != 0 {
				t.Fatalf("%d rings still attached", n)
			}
			replacement := newTransport(t, sc, 4096)
			mustPut(t, replacement, "0", "1", "restart", []byte("22"))
			if got := mustGet(t, r, "0", "1", "restart", nil); string(got) != "22" {
				t.Fatalf("got %q", got)
			}
			// Discovery pruned the dead producer's marker and its ring.
			if _, err := os.Stat(scope.ShmDir + "/" + old.Name); !os.IsNotExist(err) {
				t.Fatalf("dead ring file: %v", err)
			}
			if _, err := os.Stat(scope.New(sc).RingDir() + "/" + old.Name); !os.IsNotExist(err) {
				t.Fatalf("dead marker: %v", err)
			}
		})
	}
}

func TestPythonRingAttachRejectedAsDeadProducer(t *testing.T) {
	sc := shmtest.Scope(t)
	names := scope.New(sc)
	file, want := loadRingVector(t)
	name := names.EdgePrefix("0", "1") + "109620_" + strings.Repeat("ab", 16)
	path := scope.ShmDir + "/" + name
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path); os.Remove(names.RingDir() + "/" + name); os.Remove(names.RingDir()) })
	r := newTransport(t, sc, 4096)
	for key, w := range want.Ready {
		d := descriptor.RingHandle{Name: name, Position: w.Position, Size: w.Size}
		mustMiss(t, r, "0", "1", key, &d)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal("a descriptor miss removed the ring")
	}
	// Through discovery the marker is pruned and the dead ring removed.
	if err := os.Mkdir(names.RingDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(names.RingDir()+"/"+name, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mustMiss(t, r, "0", "1", "req55_0_55", nil)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("dead ring: %v", err)
	}
	if _, err := os.Stat(names.RingDir() + "/" + name); !os.IsNotExist(err) {
		t.Fatalf("marker: %v", err)
	}
	// The bad descriptor name is an error, not a miss.
	if _, _, _, err := r.Get("0", "1", "k", &descriptor.RingHandle{Name: "../etc/passwd"}, decodeCopy); err == nil {
		t.Fatal("invalid ring name accepted")
	}
}
