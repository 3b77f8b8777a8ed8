//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
)

func init() { roles["consume"] = roleConsume }

// roleConsume: args scope, ring bytes, request. Reads the request's chunks
// as stage 1 on "read N" (then says "read N"), to the end on "rest" (then
// says "done N" with the total read).
func roleConsume(args []string) int {
	conn, ok := openRole("1", args)
	if !ok {
		return 1
	}
	defer conn.Close()
	rd, err := NewReader(conn, "0", "1", args[2], ReaderOptions{})
	if err != nil {
		shmtest.Say("error %v", err)
		return 1
	}
	defer rd.Close()
	ctx := context.Background()
	shmtest.Say("ready")
	for {
		var cmd string
		var n int
		fmt.Sscan(shmtest.Hear(), &cmd, &n)
		switch cmd {
		case "read":
			for range n {
				if _, err := rd.Next(ctx); err != nil {
					shmtest.Say("error %v", err)
					return 1
				}
			}
			shmtest.Say("read %d", n)
		case "rest":
			for {
				_, err := rd.Next(ctx)
				if err == io.EOF {
					shmtest.Say("done %d", rd.Received())
					return 0
				}
				if err != nil {
					shmtest.Say("error %v", err)
					return 1
				}
			}
		default:
			return 1
		}
	}
}

// drainAsync runs Drain in a goroutine; the channel gets its result.
func drainAsync(ctx context.Context, s *Sender) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Drain(ctx) }()
	return done
}

func drained(t *testing.T, done <-chan error) error {
	t.Helper()
	return shmtest.Await(t, wait, "Drain to return", done)
}

// sendChunks sends chunks chunks of request, the last one finished.
func sendChunks(t *testing.T, s *Sender, request string, r, chunks int) {
	t.Helper()
	for n := range chunks {
		send := s.Send
		if n == chunks-1 {
			send = s.Finish
		}
		if err := send(context.Background(), request, map[string]any{"codes": map[string]any{"audio": codes(r, n)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// Drain returns once a consumer in another process has read every chunk
// sent: not while some are unread.
func TestDrainConsumedByAnotherProcess(t *testing.T) {
	const chunks = 12
	for _, rc := range conntest.Rings {
		t.Run(rc.Name, func(t *testing.T) {
			sc := shmtest.Scope(t)
			prod := conntest.Open(t, sc, "0", rc.Bytes)
			s := mustSender(t, prod, SenderOptions{QueueLimit: 4})
			req := shmtest.Key("drain")
			c := shmtest.Start(t, "consume", sc, strconv.Itoa(rc.Bytes), req)
			c.Expect(t, wait, "ready")
			sendChunks(t, s, req, 0, chunks)
			done := drainAsync(context.Background(), s)
			c.Send(t, "read 5")
			c.Expect(t, wait, "read 5")
			select {
			case err := <-done:
				t.Fatalf("Drain returned %v with 7 chunks unread", err)
			default:
			}
			c.Send(t, "rest")
			c.Expect(t, wait, "done 12")
			if err := drained(t, done); err != nil {
				t.Fatalf("Drain: %v", err)
			}
			c.Exited(t, wait)
			if n := <-s.Release(req); n != 0 {
				t.Fatalf("release after a drain reclaimed %d", n)
			}
			if err := s.Drain(context.Background()); err != nil {
				t.Fatalf("Drain with nothing left: %v", err)
			}
		})
	}
}

// What Drain does when chunks are not claimed: a Release's retirement is
// not waited for; any other retirement is an error naming the chunk; ctx
// ends the wait; a transport that cannot tell claims is refused.
func TestDrainUnclaimed(t *testing.T) {
	ctx := context.Background()
	for _, rc := range conntest.Rings {
		t.Run(rc.Name, func(t *testing.T) {
			prod, recv := conntest.Edge(t, rc.Bytes)
			s := mustSender(t, prod, SenderOptions{})

			// Released before Drain, and while Drain waits.
			gone := shmtest.Key("released")
			sendChunks(t, s, gone, 1, 3)
			if n := <-s.Release(gone); n != 3 {
				t.Fatalf("release reclaimed %d", n)
			}
			if err := s.Drain(ctx); err != nil {
				t.Fatalf("Drain after a release: %v", err)
			}
			later := shmtest.Key("released-later")
			sendChunks(t, s, later, 2, 3)
			done := drainAsync(ctx, s)
			if n := <-s.Release(later); n != 3 {
				t.Fatalf("release reclaimed %d", n)
			}
			if err := drained(t, done); err != nil {
				t.Fatalf("Drain across a release: %v", err)
			}

			// Retired by the connector, not by a release.
			req := shmtest.Key("cleaned")
			sendChunks(t, s, req, 3, 2)
			ended, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.Drain(ended); !errors.Is(err, context.Canceled) {
				t.Fatalf("Drain with a done ctx: %v", err)
			}
			if err := s.flush(ctx); err != nil {
				t.Fatal(err)
			}
			rd := mustReader(t, recv, req, ReaderOptions{})
			if _, err := rd.Next(ctx); err != nil { // chunk 0 is claimed
				t.Fatal(err)
			}
			prod.Cleanup(Key(req, "0", 1))
			err := s.Drain(ctx)
			if !errors.Is(err, connector.ErrRetired) {
				t.Fatalf("Drain of a chunk retired by Cleanup: %v", err)
			}
			if want := fmt.Sprintf("request %q chunk 1", req); !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %s", err, want)
			}
			<-s.Release(req)
		})
	}
	s := mustSender(t, newMem(), SenderOptions{})
	if err := s.Drain(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Drain over a transport without claims: %v", err)
	}
}
