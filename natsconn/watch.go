//go:build linux

package natsconn

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watcher is a receiving connector's one watch of the bucket: an ordered
// consumer of every edge into its stage (subjects *.{stage}.*), started at
// the stream's end. It hands each publication to the Recv calls waiting on
// its subject, and remembers the publications it delivered until it sees
// them retired, so that a receive of one that arrived before it was asked
// for claims it at once instead of reading it from the server first. What
// it forgets (beyond its budget) stays on the server for a read. Across
// reconnects and server restarts the client's ordered consumer resumes
// after the last message it delivered, so no put is skipped.
type watcher struct {
	cc jetstream.ConsumeContext

	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{}
	recent  map[string]*list.Element // of entry, by subject
	order   *list.List               // oldest first
	bytes   int
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

// The budget of the publications a watcher remembers. A claim of a
// remembered one that was taken meanwhile just fails, so forgetting early
// costs a read and remembering late costs nothing but the memory.
const (
	recentEntries = 4096
	recentBytes   = 64 << 20
)

// watch returns the connector's watcher, starting it on first use.
func (c *Connector) watch(ctx context.Context) (*watcher, error) {
	if w := c.watcher.Load(); w != nil {
		return w, nil
	}
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if w := c.watcher.Load(); w != nil {
		return w, nil
	}
	err := c.retry(ctx, func(actx context.Context) error {
		if c.closed.Load() {
			return ErrClosed
		}
		w, err := c.startWatch(actx)
		if err == nil {
			c.watcher.Store(w)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.watcher.Load(), nil
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
		FilterSubjects: []string{c.prefix + "*." + escape(string(c.opts.StageID)) + ".*"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    info.State.LastSeq + 1,
	})
	if err != nil {
		return nil, err
	}
	w := &watcher{waiters: map[string]map[*waiter]struct{}{}, recent: map[string]*list.Element{}, order: list.New()}
	w.cc, err = cons.Consume(w.deliver, jetstream.PullMaxMessages(watchBuffer),
		jetstream.PullExpiry(watchExpiry), jetstream.PullHeartbeat(watchHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("natsconn: watch: %w", err)
	}
	return w, nil
}

func (w *watcher) deliver(m jetstream.Msg) {
	e, ok := consumed(m)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Any later message of a subject, publication or marker, ends what was
	// remembered of it.
	w.forgetLocked(e.subject, e.seq)
	if !e.publication() {
		return
	}
	w.recent[e.subject] = w.order.PushBack(e)
	w.bytes += len(e.data)
	for w.order.Len() > recentEntries || w.bytes > recentBytes {
		old := w.order.Front().Value.(entry)
		w.forgetLocked(old.subject, old.seq+1)
	}
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

// remembered returns the publication of subject the watch delivered and has
// not seen retired, if it still remembers one.
func (w *watcher) remembered(subject string) (entry, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if el, ok := w.recent[subject]; ok {
		return el.Value.(entry), true
	}
	return entry{}, false
}

// forget drops what is remembered of subject below sequence before: a
// claim of it succeeded (its buffer is the claimer's now) or a later
// message replaced it.
func (w *watcher) forget(subject string, before uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgetLocked(subject, before)
}

func (w *watcher) forgetLocked(subject string, before uint64) {
	el, ok := w.recent[subject]
	if !ok || el.Value.(entry).seq >= before {
		return
	}
	w.bytes -= len(el.Value.(entry).data)
	w.order.Remove(el)
	delete(w.recent, subject)
}

func (w *watcher) stop() { w.cc.Stop() }
