//go:build linux

package main

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"omnishm/internal/shmtest"
)

// The test binary is also the program: shmtest starts it as either stage,
// and checks at the end that no stage left a file of its scope in /dev/shm.
func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{
		"pipeline": func(args []string) int { return run(args, os.Stdout, os.Stderr) },
	})
}

// The README's walkthrough, as it is run: the consumer first, the producer
// in another process, both on one scope; every request arrives whole.
func TestPipeline(t *testing.T) {
	s := shmtest.Scope(t)
	consumer := shmtest.Start(t, "pipeline", "-stage", "1", "-scope", s, "-requests", "3", "-chunks", "5")
	if l := consumer.Line(t, 20*time.Second); !strings.HasPrefix(l, "stage 1: waiting for 3 requests") {
		t.Fatalf("consumer: %q", l)
	}
	producer := shmtest.Start(t, "pipeline", "-stage", "0", "-scope", s, "-requests", "3", "-chunks", "5")
	var got []string
	for range 3 {
		got = append(got, consumer.Line(t, 20*time.Second))
	}
	slices.Sort(got)
	want := []string{"stage 1: req-0: 5 chunks, sum 9730", "stage 1: req-1: 5 chunks, sum 140009730", "stage 1: req-2: 5 chunks, sum 280009730"}
	if !slices.Equal(got, want) {
		t.Errorf("consumer printed %q, want %q", got, want)
	}
	if l := producer.Line(t, 20*time.Second); !strings.HasPrefix(l, "stage 0: sending 15 chunks") {
		t.Errorf("producer: %q", l)
	}
	if l := producer.Line(t, 20*time.Second); l != "stage 0: all 15 chunks claimed (0 reclaimed)" {
		t.Errorf("producer: %q", l)
	}
	for name, p := range map[string]*shmtest.Proc{"producer": producer, "consumer": consumer} {
		if err := p.Wait(t, 20*time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Either stage stops cleanly on SIGTERM: exit 130, and (checked by
// TestMain) nothing of its scope left in /dev/shm, not even the chunks the
// producer published and nobody claimed.
func TestStopsOnSignal(t *testing.T) {
	for _, stage := range []string{"0", "1"} {
		t.Run("stage "+stage, func(t *testing.T) {
			p := shmtest.Start(t, "pipeline", "-stage", stage, "-scope", shmtest.Scope(t))
			if l := p.Line(t, 20*time.Second); !strings.HasPrefix(l, "stage "+stage+": ") {
				t.Fatalf("stage %s: %q", stage, l)
			}
			if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			err := p.Wait(t, 20*time.Second)
			if code := p.Cmd.ProcessState.ExitCode(); code != 130 {
				t.Fatalf("stage %s after SIGTERM: %v, want exit status 130", stage, err)
			}
		})
	}
}
