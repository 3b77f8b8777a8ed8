package natsconn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watcher is a receiving connector's one watch of the bucket: an ordered
// consumer of every edge into its stage (subjects *.{stage}.*), started at
// the stream's end. It hands each publication to the Recv calls waiting on
// its subject and drops the rest, which stay on the server for a later Get.
// Across reconnects and server restarts the client's ordered consumer
// resumes after the last message it delivered, so no put is skipped.
type watcher struct {
	cc jetstream.ConsumeContext

	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{}
}

// waiter is one Recv's mailbox: the newest publication of its subject (an
// older one is replaced on the server anyway, so only the newest can still
// be claimed).
type waiter struct{ ch chan entry }

// Consume settings of the watch: a small buffer (publications nobody waits
// for are dropped at once) and heartbeats frequent enough that a stalled
// consumer is recreated within seconds.
const (
	watchBuffer    = 64
	watchExpiry    = 10 * time.Second
	watchHeartbeat = 2 * time.Second
)

// watch returns the connector's watcher, starting it on first use.
func (c *Connector) watch(ctx context.Context) (*watcher, error) {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	backoff := minBackoff
	for c.watcher == nil {
		if c.closed.Load() {
			return nil, ErrClosed
		}
		actx, cancel := c.attempt(ctx, 0)
		w, err := c.startWatch(actx)
		cancel()
		if err == nil {
			c.watcher = w
			break
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			return nil, err
		}
		if perr := c.link.pause(ctx, &backoff); perr != nil {
			return nil, c.unreachable(errors.Join(perr, err))
		}
	}
	return c.watcher, nil
}

func (c *Connector) startWatch(ctx context.Context) (*watcher, error) {
	// Start after the stream's last message rather than with "deliver new":
	// the client would re-apply that policy to a consumer it recreates
	// before any delivery, skipping what was put in between. A put older
	// than the start is found by the Get each Recv makes after registering.
	info, err := c.stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	cons, err := c.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{c.prefix + "*." + escape(c.opts.StageID) + ".*"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    info.State.LastSeq + 1,
	})
	if err != nil {
		return nil, err
	}
	w := &watcher{waiters: map[string]map[*waiter]struct{}{}}
	w.cc, err = cons.Consume(w.deliver, jetstream.PullMaxMessages(watchBuffer),
		jetstream.PullExpiry(watchExpiry), jetstream.PullHeartbeat(watchHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("natsconn: watch: %w", err)
	}
	return w, nil
}

func (w *watcher) deliver(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	e := entry{subject: m.Subject(), seq: meta.Sequence.Stream, header: m.Headers(), data: m.Data()}
	if !e.publication() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for wt := range w.waiters[e.subject] {
		select {
		case <-wt.ch: // superseded
		default:
		}
		wt.ch <- e // only deliver sends, under w.mu: there is room
	}
}

// register makes the watcher hand subject's publications to the returned
// waiter until unregister.
func (w *watcher) register(subject string) *waiter {
	wt := &waiter{ch: make(chan entry, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiters[subject] == nil {
		w.waiters[subject] = map[*waiter]struct{}{}
	}
	w.waiters[subject][wt] = struct{}{}
	return wt
}

func (w *watcher) unregister(subject string, wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiters[subject], wt)
	if len(w.waiters[subject]) == 0 {
		delete(w.waiters, subject)
	}
}

func (w *watcher) stop() { w.cc.Stop() }
