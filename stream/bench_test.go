//go:build linux

package stream

import (
	"context"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
)

// BenchmarkStream moves one request's [1, 28] int64 chunks through a Sender
// and a Reader on two real connectors in one process; ns/op is per chunk.
// The in-memory transport is the baseline: the stream's own cost.
func BenchmarkStream(b *testing.B) {
	cases := []struct {
		name string
		open func(b *testing.B) (prod, recv connector.Transport)
	}{
		{"memory", func(b *testing.B) (connector.Transport, connector.Transport) { m := newMem(); return m, m }},
	}
	for _, rc := range conntest.Rings {
		cases = append(cases, struct {
			name string
			open func(b *testing.B) (prod, recv connector.Transport)
		}{rc.Name, func(b *testing.B) (connector.Transport, connector.Transport) {
			sc := shmtest.Scope(b)
			return conntest.Open(b, sc, "0", rc.Bytes), conntest.Open(b, sc, "1", rc.Bytes)
		}})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			prod, recv := c.open(b)
			s, err := NewSender(prod, "0", "1", SenderOptions{QueueLimit: 64})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			req := shmtest.Key("bench")
			rd, err := NewReader(recv, "0", "1", req, ReaderOptions{})
			if err != nil {
				b.Fatal(err)
			}
			payload := map[string]any{"codes": map[string]any{"audio": codes(0, 0)}}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for i := range b.N {
					send := s.Send
					if i == b.N-1 {
						send = s.Finish
					}
					send(ctx, req, payload)
				}
			}()
			for {
				if _, err := rd.Next(ctx); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			<-s.Release(req)
		})
	}
}

// BenchmarkIdleReaders measures N stream readers waiting in Next on one
// connector with nothing arriving: idle CPU (% of one core, over a 2 s
// window: a measurement interval, not a wait for a condition) and OS
// threads. Run with -benchtime=1x, one sub-benchmark per process (threads
// a runtime made stay).
func BenchmarkIdleReaders(b *testing.B) {
	for _, n := range []int{50, 1000} {
		b.Run("readers="+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				sc := shmtest.Scope(b)
				recv := conntest.Open(b, sc, "1", ring.DefaultCapacity)
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				for range n {
					rd, err := NewReader(recv, "0", "1", shmtest.Key("idle"), ReaderOptions{})
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() {
						defer rd.Close()
						rd.Next(ctx)
					})
				}
				shmtest.Eventually(b, wait, "the readers to wait", func() bool { return recv.Waiting() == n })
				time.Sleep(time.Second) // the safety re-poll backs off
				c0, w0 := shmtest.CPUTime(b), time.Now()
				time.Sleep(2 * time.Second)
				b.ReportMetric(100*float64(shmtest.CPUTime(b)-c0)/float64(time.Since(w0)), "idle-cpu-%")
				b.ReportMetric(float64(shmtest.Threads(b)), "threads")
				cancel()
				wg.Wait()
			}
		})
	}
}
