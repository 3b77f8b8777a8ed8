//go:build linux

package stream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/proc"
)

// A Reader that would block in Recv must be on the edge's receiving stage:
// on any other, Recv would wait on another edge.
func TestReaderOnAnotherStageIsRefused(t *testing.T) {
	if _, err := NewReader(newMem(), "1", "2", "r", ReaderOptions{}); !errors.Is(err, connector.ErrBadStage) {
		t.Fatalf("reader of 1->2 on a stage-1 receiver: %v", err)
	}
	// A transport that only polls names no stage: any edge is fine.
	if _, err := NewReader(pollOnly{newMem()}, "1", "2", "r", ReaderOptions{}); err != nil {
		t.Fatal(err)
	}
	// The producer's own connector, which receives as no stage, would take
	// the chunks meant for the receiving stage: refused, and a Mux too.
	producer := conntest.Open(t, shmtest.Scope(t), connector.NoStage, 0)
	if _, err := NewReader(producer, "0", "1", "r", ReaderOptions{}); !errors.Is(err, connector.ErrBadStage) {
		t.Errorf("reader of 0->1 on the producer's connector: %v", err)
	}
	if _, err := NewMux(producer, "0", "1", MuxOptions{}); !errors.Is(err, connector.ErrBadStage) {
		t.Errorf("mux of 0->1 on the producer's connector: %v", err)
	}
}

// TestReaderSenderGone: a reader whose sender has exited still delivers
// the chunks published before, then gives up with ErrSenderGone; one with
// no sender given gives up after its progress timeout; a live sender keeps
// a reader waiting until ctx ends.
func TestReaderSenderGone(t *testing.T) {
	self, err := proc.Self()
	if err != nil {
		t.Fatal(err)
	}
	// This pid with another start time: the process that was is gone.
	dead := proc.ID{PID: self.PID, Start: self.Start + 1}
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			m := newMem()
			tr := tc.wrap(m)
			ctx := context.Background()
			rd := mustReader(t, tr, "r", ReaderOptions{Sender: dead, ProgressTimeout: time.Hour})
			m.Put("0", "1", Key("r", "0", 0), map[string]any{})
			if _, err := rd.Next(ctx); err != nil {
				t.Fatalf("chunk put before death: %v", err)
			}
			if _, err := rd.Next(ctx); !errors.Is(err, ErrSenderGone) || !strings.Contains(err.Error(), "dead") {
				t.Fatalf("dead sender: %v", err)
			}
			if _, err := rd.Next(ctx); !errors.Is(err, ErrSenderGone) {
				t.Fatalf("after the sender's exit: %v", err)
			}
			quiet := mustReader(t, tr, "q", ReaderOptions{ProgressTimeout: 20 * time.Millisecond})
			if _, err := quiet.Next(ctx); !errors.Is(err, ErrSenderGone) {
				t.Fatalf("silent sender: %v", err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := quiet.Next(cctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled: %v", err)
			}
			live := mustReader(t, tr, "l", ReaderOptions{Sender: self, CheckInterval: time.Millisecond, ProgressTimeout: time.Hour})
			sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			if _, err := live.Next(sctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("live sender: %v", err)
			}
		})
	}
}

func TestReaderBadChunk(t *testing.T) {
	m := newMem()
	m.Put("0", "1", Key("r", "0", 0), []byte("x"))
	if _, err := mustReader(t, m, "r", ReaderOptions{}).Next(context.Background()); !errors.Is(err, ErrBadChunk) {
		t.Fatalf("non-map chunk: %v", err)
	}
}

// Readers of one sender share one watch of it (one pidfd however many
// requests a stage reads); the last Close releases it.
func TestReadersOfOneSenderShareOneWatch(t *testing.T) {
	self, err := proc.Self()
	if err != nil {
		t.Fatal(err)
	}
	m := newMem()
	a := mustReader(t, m, "a", ReaderOptions{Sender: self})
	b := mustReader(t, m, "b", ReaderOptions{Sender: self})
	if a.sender == nil || a.sender != b.sender || a.sender.refs != 2 {
		t.Fatalf("watches %p %p", a.sender, b.sender)
	}
	held := func() bool { watchesMu.Lock(); defer watchesMu.Unlock(); return watches[self] != nil }
	a.Close()
	a.Close()
	if !held() {
		t.Fatal("the watch was released while a reader holds it")
	}
	b.Close()
	if held() {
		t.Fatal("the watch outlives its readers")
	}
}
