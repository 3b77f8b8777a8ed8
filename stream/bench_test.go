package stream

import (
	"context"
	"io"
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
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
