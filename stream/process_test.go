//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
)

const wait = 30 * time.Second

// roles are the child processes of the cross-process tests.
var roles = map[string]func(args []string) int{
	"consume":   roleConsume,
	"produce":   roleProduce,
	"stallmany": roleStallMany,
	"wait":      roleWait,
}

// roleWait says "ready" and lives until it hears a line: a process to
// watch.
func roleWait([]string) int {
	shmtest.Say("ready")
	shmtest.Hear()
	return 0
}

// openRole opens a child role's connector as stage on the scope args[0],
// with HostRingBytes args[1]; on an error it says "error ..." and is false.
func openRole(stage connector.Stage, args []string) (*connector.SHM, bool) {
	ringBytes, _ := strconv.Atoi(args[1])
	conn, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: stage, HostRingBytes: ringBytes})
	if err != nil {
		shmtest.Say("error %v", err)
		return nil, false
	}
	return conn, true
}

// roleProduce: args scope, ring bytes, chunks, requests...: sends the
// requests' chunks interleaved as stage 0, says "sent", and on "release"
// releases every request and says how many chunks that reclaimed.
func roleProduce(args []string) int {
	chunks, _ := strconv.Atoi(args[2])
	requests := args[3:]
	conn, ok := openRole("0", args)
	if !ok {
		return 1
	}
	defer conn.Close()
	s, err := NewSender(conn, "0", "1", SenderOptions{QueueLimit: 8})
	if err != nil {
		shmtest.Say("error %v", err)
		return 1
	}
	ctx := context.Background()
	for n := range chunks {
		for r, req := range requests {
			send := s.Send
			if n == chunks-1 {
				send = s.Finish
			}
			if err := send(ctx, req, map[string]any{"codes": map[string]any{"audio": codes(r, n)}}); err != nil {
				shmtest.Say("error %v", err)
				return 1
			}
		}
	}
	shmtest.Say("sent")
	if shmtest.Hear() != "release" {
		return 1
	}
	reclaimed := 0
	for _, req := range requests {
		reclaimed += <-s.Release(req)
	}
	if err := s.Close(); err != nil {
		shmtest.Say("error %v", err)
		return 1
	}
	shmtest.Say("reclaimed %d", reclaimed)
	return 0
}

// roleStallMany: args scope, ring bytes, chunks, requests...: puts that
// many chunks of each request, finishes none, says "sent" and waits to be
// killed.
func roleStallMany(args []string) int {
	chunks, _ := strconv.Atoi(args[2])
	conn, ok := openRole("0", args)
	if !ok {
		return 1
	}
	defer conn.Close()
	s, _ := NewSender(conn, "0", "1", SenderOptions{})
	for n := range chunks {
		for r, req := range args[3:] {
			s.Send(context.Background(), req, map[string]any{"codes": map[string]any{"audio": codes(r, n)}})
		}
	}
	return closeSaySent(s)
}

// closeSaySent ends a producer role: it closes s (every chunk put), says
// "sent" and waits for a line; the role's exit status.
func closeSaySent(s *Sender) int {
	if err := s.Close(); err != nil {
		shmtest.Say("error %v", err)
		return 1
	}
	shmtest.Say("sent")
	shmtest.Hear()
	return 0
}

// startStalled starts a stallmany producer of chunks chunks of each of
// requests, on a scope of the test's own with a receiver (stage 1) open,
// and returns once the producer has sent them all.
func startStalled(tb testing.TB, ringBytes, chunks int, requests ...string) (*connector.SHM, *shmtest.Proc) {
	tb.Helper()
	sc := conntest.CrashScope(tb, requests...)
	recv := conntest.Open(tb, sc, "1", ringBytes)
	p := shmtest.Start(tb, "stallmany", append([]string{sc, strconv.Itoa(ringBytes), strconv.Itoa(chunks)}, requests...)...)
	p.Expect(tb, wait, "sent")
	return recv, p
}

// roleConsume: args scope, ring bytes, request. Reads the request's chunks
// as stage 1 on "read N" (then says "read N"), to the end on "rest" (then
// says "done N" with the total read).
func roleConsume(args []string) int {
	conn, ok := openRole("1", args)
	if !ok {
		return 1
	}
	defer conn.Close()
	// One chunk claimed per chunk read (no Prefetch): the test counts
	// what was read as claimed.
	rd, err := NewReader(conn, "0", "1", args[2], ReaderOptions{Prefetch: -1})
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

// releaseDrained has a "produce" child, whose chunks were all read, release
// its requests (reclaiming nothing) and exit.
func releaseDrained(t *testing.T, p *shmtest.Proc) {
	t.Helper()
	p.Expect(t, wait, "sent")
	p.Send(t, "release")
	p.Expect(t, wait, "reclaimed 0")
	p.Exited(t, wait)
}

// TestCrossProcessInterleaved: a producer process interleaves the chunks of
// many requests; one reader per request, all on one connector, gets each
// request's chunks once, in order, with the finish mark on the last.
func TestCrossProcessInterleaved(t *testing.T) {
	const requests, chunks = 8, 24
	conntest.EachRing(t, func(t *testing.T, sc string, ringBytes int) {
		recv := conntest.Open(t, sc, "1", ringBytes)
		var ids []string
		for range requests {
			ids = append(ids, shmtest.Key("req"))
		}
		p := shmtest.Start(t, "produce", append([]string{sc, strconv.Itoa(ringBytes), strconv.Itoa(chunks)}, ids...)...)
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, requests)
		sender := p.ID(t)
		for r, id := range ids {
			rd := mustReader(t, recv, id, ReaderOptions{Sender: sender})
			wg.Go(func() { errs[r] = readAll(ctx, rd, r, chunks) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		releaseDrained(t, p)
		h := recv.Health()
		if h.Gets != requests*chunks {
			t.Fatalf("receiver health %+v, want %d gets", h, requests*chunks)
		}
		// The 4 MiB ring holds the whole run; the 4 KiB one mixes paths.
		switch {
		case ringBytes == ring.DefaultCapacity && h.HostRingGets != h.Gets,
			ringBytes == connector.NoRing && h.HostRingGets != 0:
			t.Fatalf("receiver health %+v: wrong path for ring bytes %d", h, ringBytes)
		}
		t.Logf("receiver health %+v", h)
	})
}

// TestReleaseAfterFinishRealConnector is the seed's
// test_shm_release_reclaims_undrained_chunks_after_finish on the real
// connector: the receiver drains chunk 0 of a finished three-chunk request;
// release reclaims exactly chunks 1 and 2; siblings whose ids share the
// prefix keep theirs.
func TestReleaseAfterFinishRealConnector(t *testing.T) {
	conntest.EachRing(t, func(t *testing.T, sc string, ringBytes int) {
		prod := conntest.Open(t, sc, "0", ringBytes)
		recv := conntest.Open(t, sc, "1", ringBytes)
		s := mustSender(t, prod, SenderOptions{})
		ctx := context.Background()
		req := shmtest.Key("req")
		// req+"0" shares the text prefix; req+"_0_1" even starts with
		// the release prefix {req}_0_ and survives only because
		// cleanup_prefix takes digits alone (SPEC §9).
		siblings := []string{req + "0", req + "_0_1"}
		for n := range 3 {
			send := s.Send
			if n == 2 {
				send = s.Finish
			}
			if err := send(ctx, req, map[string]any{"codes": map[string]any{"audio": codes(1, n)}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, sib := range siblings {
			if err := s.Send(ctx, sib, map[string]any{"who": "sibling"}); err != nil {
				t.Fatal(err)
			}
		}
		rd := mustReader(t, recv, req, ReaderOptions{Prefetch: -1}) // claims chunk 0 alone
		if c, err := rd.Next(ctx); err != nil || Finished(c) {
			t.Fatalf("chunk 0: %v %v", c, err)
		}
		if n := <-s.Release(req); n != 2 || s.Reclaimed() != 2 {
			t.Fatalf("release reclaimed %d (total %d), want 2", n, s.Reclaimed())
		}
		for n := 1; n < 3; n++ {
			if p, _, ok, err := recv.Get("0", "1", Key(req, "0", n), nil); ok || err != nil {
				t.Fatalf("chunk %d still there after release: %v %v", n, p, err)
			}
		}
		for _, sib := range siblings {
			p, _, ok, err := recv.Get("0", "1", Key(sib, "0", 0), nil)
			if !ok || err != nil || p.(map[string]any)["who"] != "sibling" {
				t.Fatalf("sibling %s lost its chunk: %v %v %v", sib, p, ok, err)
			}
		}
		for _, sib := range siblings {
			if n := <-s.Release(sib); n != 0 {
				t.Fatalf("release of drained %s reclaimed %d", sib, n)
			}
		}
	})
}

// cleanupSpy records CleanupPrefix calls of a real connector and holds Puts
// at a gate.
type cleanupSpy struct {
	*gatedTransport
	mu       sync.Mutex
	prefixes []string
}

func (c *cleanupSpy) CleanupPrefix(prefix string) int {
	c.mu.Lock()
	c.prefixes = append(c.prefixes, prefix)
	c.mu.Unlock()
	return c.gatedTransport.CleanupPrefix(prefix)
}

func (c *cleanupSpy) calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.prefixes)
}

// TestReleaseQueuedBehindSendsRealConnector: with the real connector's puts
// held, a release waits; once they run it reclaims all three chunks.
func TestReleaseQueuedBehindSendsRealConnector(t *testing.T) {
	conntest.EachRing(t, func(t *testing.T, sc string, ringBytes int) {
		prod := conntest.Open(t, sc, "0", ringBytes)
		spy := &cleanupSpy{gatedTransport: newGated(prod)}
		s := mustSender(t, spy, SenderOptions{})
		req := shmtest.Key("req")
		for n := range 3 {
			if err := s.Send(context.Background(), req, map[string]any{"codes": map[string]any{"audio": codes(0, n)}}); err != nil {
				t.Fatal(err)
			}
		}
		released := s.Release(req)
		<-spy.started
		if calls := spy.calls(); len(calls) != 0 || s.Reclaimed() != 0 {
			t.Fatalf("cleanup ran before the sends: %v", calls)
		}
		for range 3 {
			spy.gate <- struct{}{}
		}
		if n := <-released; n != 3 {
			t.Fatalf("reclaimed %d, want 3", n)
		}
		if calls := spy.calls(); !slices.Equal(calls, []string{Prefix(req, "0")}) {
			t.Fatalf("cleanup calls %v", calls)
		}
	})
}

// TestSenderGoneWhenKilled: the producer is killed (SIGKILL) mid-stream;
// the reader, watching its process, stops with ErrSenderGone instead of
// waiting out its hour-long progress timeout.
func TestSenderGoneWhenKilled(t *testing.T) {
	for _, rc := range conntest.Rings {
		t.Run(rc.Name, func(t *testing.T) {
			req := shmtest.Key("req")
			recv, p := startStalled(t, rc.Bytes, 3, req)
			rd := mustReader(t, recv, req, ReaderOptions{Sender: p.ID(t), ProgressTimeout: time.Hour})
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			for n := range 3 {
				if _, err := rd.Next(ctx); err != nil {
					t.Fatalf("chunk %d: %v", n, err)
				}
			}
			p.Kill()
			_, err := rd.Next(ctx)
			if !errors.Is(err, ErrSenderGone) || !strings.Contains(err.Error(), "dead") {
				t.Fatalf("after the producer was killed: %v", err)
			}
			if _, err := rd.Next(ctx); errors.Is(err, io.EOF) {
				t.Fatal("a dead stream ended as if finished")
			}
		})
	}
}

// A ring producer killed mid-stream ends its readers and its Mux requests
// with ErrSenderGone, though nobody told them its process and their
// progress timeout is an hour: they follow the producer of the ring their
// chunks came from.
func TestRingProducerDeathEndsReaders(t *testing.T) {
	const readers, chunks = 4, 3
	ids := make([]string, readers+1)
	for i := range ids {
		ids[i] = shmtest.Key("dies")
	}
	recv, p := startStalled(t, ring.DefaultCapacity, chunks, ids...)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	hour := ReaderOptions{ProgressTimeout: time.Hour}
	var rds []*Reader
	for _, id := range ids[:readers] {
		rd := mustReader(t, recv, id, hour)
		for n := range chunks {
			if _, err := rd.Next(ctx); err != nil {
				t.Fatalf("chunk %d: %v", n, err)
			}
		}
		rds = append(rds, rd)
	}
	m := mustMux(t, recv, MuxOptions{Reader: hour})
	if err := m.Add(ids[readers]); err != nil {
		t.Fatal(err)
	}
	for n := range chunks {
		if c, err := m.Next(ctx); err != nil || c.N != n {
			t.Fatalf("mux chunk %d: %+v %v", n, c, err)
		}
	}
	errs := make(chan error, readers)
	for _, rd := range rds {
		go func() { _, err := rd.Next(ctx); errs <- err }()
	}
	shmtest.Eventually(t, wait, "every reader to wait", func() bool { return recv.Waiting() == readers+1 })
	p.Kill()
	for range readers {
		want := fmt.Sprintf("of the ring chunk %d came through is dead; the last chunk received, %d, came ", chunks-1, chunks-1)
		if err := <-errs; !errors.Is(err, ErrSenderGone) || !strings.Contains(err.Error(), want) {
			t.Fatalf("a reader after its producer was killed: %v, want %q in it", err, want)
		}
	}
	c, err := m.Next(ctx)
	if !errors.Is(err, ErrSenderGone) || c.Request != ids[readers] {
		t.Fatalf("the mux after the producer was killed: %+v %v", c, err)
	}
	if _, err := rds[0].Next(ctx); !errors.Is(err, ErrSenderGone) {
		t.Fatalf("a dead stream's next Next: %v", err)
	}
}

// BenchmarkSenderGoneAfterKill measures how soon a reader that received a
// chunk through a ring fails with ErrSenderGone after its producer is
// SIGKILLed (20 tries; it is not told the producer's process, and its
// progress timeout is an hour): p50 and p99 from the kill to Next's error.
func BenchmarkSenderGoneAfterKill(b *testing.B) {
	const tries = 20
	for b.Loop() {
		var took []time.Duration
		for range tries {
			took = append(took, killAndWait(b))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
	}
}

func killAndWait(b *testing.B) time.Duration {
	req := shmtest.Key("kill")
	recv, p := startStalled(b, ring.DefaultCapacity, 1, req)
	rd, err := NewReader(recv, "0", "1", req, ReaderOptions{ProgressTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := rd.Next(ctx); err != nil {
		b.Fatal(err)
	}
	done := make(chan time.Time, 1)
	go func() {
		_, err := rd.Next(ctx)
		if !errors.Is(err, ErrSenderGone) {
			b.Error(err)
		}
		done <- time.Now()
	}()
	shmtest.Eventually(b, wait, "the reader to wait", func() bool { return recv.Waiting() == 1 })
	start := time.Now()
	p.Kill()
	return (<-done).Sub(start)
}
