//go:build linux

package natsconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"omnishm/internal/conntest"
	"omnishm/stream"
)

// The stream package over NATS: interleaved requests, each read in order by
// its own Reader sleeping in Recv, all sharing one receiving connector.
func TestStreamOverNats(t *testing.T) {
	producer, receiver := edge(t, startServer(t))
	const requests, chunks = 6, 20
	s, err := stream.NewSender(producer, "0", "1", stream.SenderOptions{QueueLimit: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	ids := make([]string, requests)
	for r := range ids {
		ids[r] = fmt.Sprintf("req-%d", r)
	}
	var wg sync.WaitGroup
	errs := make([]error, requests)
	for r, id := range ids {
		rd, err := stream.NewReader(receiver, "0", "1", id, stream.ReaderOptions{ProgressTimeout: wait})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for n := 0; ; n++ {
				chunk, err := rd.Next(ctx)
				if err == io.EOF && n == chunks {
					return
				}
				if err != nil {
					errs[r] = fmt.Errorf("%s chunk %d: %w", id, n, err)
					return
				}
				if got := conntest.ChildCodes(chunk); got[0] != int64(100*r+n) {
					errs[r] = fmt.Errorf("%s chunk %d holds %v", id, n, got)
					return
				}
			}
		})
	}
	for n := range chunks {
		for r, id := range ids {
			send := s.Send
			if n == chunks-1 {
				send = s.Finish
			}
			if err := send(ctx, id, codes(1, int64(100*r+n))); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if n := <-s.Release(id); n != 0 {
			t.Fatalf("release of drained %s reclaimed %d", id, n)
		}
	}
	if h := receiver.Health(); h.Gets != requests*chunks {
		t.Fatalf("receiver health %+v", h)
	}
}

// The seed's release test over NATS: of a finished three-chunk request
// whose reader took chunk 0, release reclaims exactly chunks 1 and 2;
// requests whose ids share the prefix keep theirs.
func TestStreamReleaseOverNats(t *testing.T) {
	producer, receiver := edge(t, startServer(t))
	s, err := stream.NewSender(producer, "0", "1", stream.SenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	siblings := []string{"req0", "req_0_1"}
	for n := range 3 {
		send := s.Send
		if n == 2 {
			send = s.Finish
		}
		if err := send(ctx, "req", codes(1, int64(n))); err != nil {
			t.Fatal(err)
		}
	}
	for _, sib := range siblings {
		if err := s.Send(ctx, sib, map[string]any{"who": "sibling"}); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := stream.NewReader(receiver, "0", "1", "req", stream.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := rd.Next(ctx); err != nil || stream.Finished(c) {
		t.Fatalf("chunk 0: %v %v", c, err)
	}
	if n := <-s.Release("req"); n != 2 {
		t.Fatalf("release reclaimed %d, want 2", n)
	}
	for n := 1; n < 3; n++ {
		conntest.Missing(t, receiver, "0", "1", stream.Key("req", "0", n), nil)
	}
	for _, sib := range siblings {
		if p := conntest.MustGet(t, receiver, "0", "1", stream.Key(sib, "0", 0), nil); p.(map[string]any)["who"] != "sibling" {
			t.Fatalf("sibling %s: %v", sib, p)
		}
	}
}
