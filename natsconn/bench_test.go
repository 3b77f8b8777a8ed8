//go:build linux

package natsconn

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"omnishm/tensor"
)

// benchSizes are the payloads' tensor bytes.
var benchSizes = []struct {
	name string
	n    int
}{{"512B", 512}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

// latencies collects one cycle's durations and reports their percentiles
// and the rate they make one after another.
type latencies []time.Duration

func (l latencies) report(b *testing.B, name string) time.Duration {
	slices.Sort(l)
	var total time.Duration
	for _, d := range l {
		total += d
	}
	p50 := l[len(l)/2]
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, name+"-p50-µs")
	b.ReportMetric(float64(l[len(l)*99/100].Nanoseconds())/1e3, name+"-p99-µs")
	b.ReportMetric(float64(len(l))/total.Seconds(), name+"-msgs/s")
	return p50
}

// settle is the idle time given to a waiting receiver (and to the engine's
// waiting fetch) before the put it waits for: both then pay the same cost
// of waking a sleeping receiver, which on a small VM is most of a cycle.
const settle = 200 * time.Microsecond

// BenchmarkEdge measures, in one loop over the same embedded server (file
// storage, 8 MiB messages so 1 MiB payloads fit one message), interleaved
// so that all of them see the same machine:
//
//   - floor: the engine's own cycle for the same bytes, a JetStream
//     publish (acknowledged), then a pull consumer's fetch of it and its ack;
//   - floor-acksync: the same with the ack confirmed by the server, as a
//     claim is (an unconfirmed ack may be lost and the message redelivered);
//   - get: Put, then Get of the key (a direct get and the claim);
//   - floor-wait: the floor with the fetch already waiting, idle, when the
//     publish is made;
//   - recv: Put while a Recv waits, idle, on its watch (the claim of the
//     publication the watch delivers).
//
// ratio-get is get's median latency over floor's, ratio-recv recv's over
// floor-wait's, ratio-get-acksync get's over floor-acksync's. ns/op is the
// five cycles together.
func BenchmarkEdge(b *testing.B) {
	ts := startServer(b, func(o *server.Options) { o.MaxPayload = 8 << 20 })
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			sender, receiver := edge(b, ts, func(o *Options) { o.Timeout = 10 * time.Second })
			// Get's receiver is another stage: receiver's watch would see
			// its puts too, and a Get-only receiver has no watch.
			getter := openConn(b, ts.url(), sender.opts.Bucket, "2", func(o *Options) { o.Timeout = 10 * time.Second })
			data, _ := tensor.Zeros(tensor.Uint8, size.n)
			for i := range data.Data {
				data.Data[i] = byte(i)
			}
			payload := map[string]any{"data": data}
			frameBytes, _, err := encode(payload)
			if err != nil {
				b.Fatal(err)
			}
			floor := newFloor(b, ts, size.name)
			waiting := floor.waiter(b)
			keys := make(chan string)
			got := make(chan error)
			go func() {
				for key := range keys {
					_, _, err := receiver.Recv(context.Background(), "0", key)
					got <- err
				}
			}()
			defer close(keys)

			var floorL, floorSyncL, getL, floorWaitL, recvL latencies
			i := 0
			cycles := []func(){
				func() { floorL = append(floorL, floor.cycle(b, frameBytes, false)) },
				func() { floorSyncL = append(floorSyncL, floor.cycle(b, frameBytes, true)) },
				func() {
					key := "get_" + strconv.Itoa(i)
					start := time.Now()
					if _, _, err := sender.Put("0", "2", key, payload); err != nil {
						b.Fatal(err)
					}
					if _, _, ok, err := getter.Get("0", "2", key, nil); !ok || err != nil {
						b.Fatalf("get: ok=%v %v", ok, err)
					}
					getL = append(getL, time.Since(start))
				},
				func() { floorWaitL = append(floorWaitL, waiting(frameBytes)) },
				func() {
					key := "recv_" + strconv.Itoa(i)
					keys <- key
					for receiver.asleep.Load() == 0 {
						time.Sleep(settle / 10) // not spinning: the CPUs are the servers' too
					}
					time.Sleep(settle)
					start := time.Now()
					if _, _, err := sender.Put("0", "1", key, payload); err != nil {
						b.Fatal(err)
					}
					if err := <-got; err != nil {
						b.Fatal(err)
					}
					recvL = append(recvL, time.Since(start))
				},
			}
			// A cycle runs faster after a busy one than after an idle one:
			// each iteration runs them in another order.
			order := rand.New(rand.NewPCG(1, 2))
			b.ResetTimer()
			for i = range b.N {
				order.Shuffle(len(cycles), func(a, b int) { cycles[a], cycles[b] = cycles[b], cycles[a] })
				for _, cycle := range cycles {
					cycle()
				}
			}
			b.StopTimer()
			f, fs, g := floorL.report(b, "floor"), floorSyncL.report(b, "floor-acksync"), getL.report(b, "get")
			fw, r := floorWaitL.report(b, "floor-wait"), recvL.report(b, "recv")
			b.ReportMetric(float64(g)/float64(f), "ratio-get")
			b.ReportMetric(float64(g)/float64(fs), "ratio-get-acksync")
			b.ReportMetric(float64(r)/float64(fw), "ratio-recv")
			b.SetBytes(int64(len(frameBytes)))
		})
	}
}

// floor is the engine's cycle: a stream with one subject and a durable
// pull consumer with explicit acks. The publisher and the consumer have a
// connection each, as a producer and a receiver of an edge do.
type floor struct {
	js      jetstream.JetStream
	subject string
	cons    jetstream.Consumer
}

func newFloor(b *testing.B, ts *testServer, name string) *floor {
	nc, js := client(b, ts.url())
	b.Cleanup(nc.Close)
	cnc, cjs := client(b, ts.url())
	b.Cleanup(cnc.Close)
	ctx := context.Background()
	stream := "FLOOR_" + name
	// A work queue: an acked message goes, as a claimed publication does.
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"floor." + name}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		b.Fatal(err)
	}
	cons, err := cjs.Consumer(ctx, stream, "floor")
	if err != nil {
		b.Fatal(err)
	}
	return &floor{js: js, subject: "floor." + name, cons: cons}
}

// waiter returns the floor-wait cycle: a fetch is made in another
// goroutine and left waiting for settle, then data is published; it
// returns the time from the publish to the fetched message's ack.
func (f *floor) waiter(b *testing.B) func(data []byte) time.Duration {
	fetching, acked := make(chan struct{}), make(chan time.Time)
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case <-stop:
				return
			case fetching <- struct{}{}:
			}
			batch, err := f.cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
			if err != nil {
				b.Error(err)
				return
			}
			for m := range batch.Messages() {
				m.Ack()
			}
			acked <- time.Now()
		}
	}()
	return func(data []byte) time.Duration {
		<-fetching
		time.Sleep(settle)
		start := time.Now()
		if _, err := f.js.Publish(context.Background(), f.subject, data); err != nil {
			b.Fatal(err)
		}
		return (<-acked).Sub(start)
	}
}

func (f *floor) cycle(b *testing.B, data []byte, confirm bool) time.Duration {
	ctx := context.Background()
	start := time.Now()
	if _, err := f.js.Publish(ctx, f.subject, data); err != nil {
		b.Fatal(err)
	}
	batch, err := f.cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		ack := m.Ack
		if confirm {
			ack = func() error { return m.DoubleAck(ctx) }
		}
		if err := ack(); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if n != 1 || batch.Error() != nil {
		b.Fatalf("fetched %d: %v", n, batch.Error())
	}
	return time.Since(start)
}
