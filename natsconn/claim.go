//go:build linux

package natsconn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"omnishm/connector"
	"omnishm/descriptor"
)

// ErrRetired is wrapped by Claimed and WaitClaimed for a publication that
// no receiver claimed and that is gone: its producer retired it (Cleanup,
// CleanupPrefix, Close), a newer put of its key replaced it, it expired
// (Options.MaxAge), or a NATS tool removed it. The error says which.
var ErrRetired = connector.ErrRetired

// The producer operations a retirement marker names (hdrRetiredBy).
const (
	byCleanup       = "Cleanup"
	byCleanupPrefix = "CleanupPrefix"
	byClose         = "Close"
)

// fate is what became of a publication.
type fate int

const (
	waiting fate = iota // still the entry's last message: nobody claimed it yet
	claimed
	retired
)

// Claimed reports whether a receiver has claimed the publication d, which
// a Put of this bucket returned (of this connector or another, in any
// process): false with a nil error while it waits; false with an error
// wrapping ErrRetired once it is gone unclaimed. It asks the stream's
// leader, waiting for the server as a Get does.
//
// The entry keeps only its last message, so once a later one has replaced
// the claim's marker (a newer put of the key; the marker's own expiry) the
// publication's fate is known only to this connector's record of what it
// retired: beyond that it reads as claimed, as it no longer waits.
// WaitClaimed, which sees every message from the publication on, has no
// such blind spot. A malformed descriptor, or one of another bucket, wraps
// connector.ErrBadDescriptor.
func (c *Connector) Claimed(d connector.Descriptor) (bool, error) {
	subject, rev, err := c.claimSubject(d)
	if err != nil {
		return false, fmt.Errorf("natsconn: claimed: %w", err)
	}
	ctx, cancel := c.opContext(0)
	defer cancel()
	f, why, err := c.fateNow(ctx, subject, rev)
	if err == nil && f == retired {
		err = fmt.Errorf("%w (%s)", ErrRetired, why)
	}
	if err != nil {
		return false, fmt.Errorf("natsconn: claimed %s@%d: %w", subject, rev, err)
	}
	if f == claimed {
		c.pending.forget(subject, rev) // nothing left for Cleanup or Close to retire
	}
	return f == claimed, nil
}

// WaitClaimed blocks until a receiver has claimed the publication d (nil),
// it is gone unclaimed (an error wrapping ErrRetired, as Claimed defines
// it), ctx ends (ctx.Err()), the connector closes (ErrClosed), or the server
// has been unreachable for the configured timeout (ErrUnreachable). It
// never polls: an ordered consumer of the publication's subject, started
// at its revision, delivers the claim's marker (or whatever replaced the
// publication) as the server stores it.
func (c *Connector) WaitClaimed(ctx context.Context, d connector.Descriptor) error {
	subject, rev, err := c.claimSubject(d)
	if err != nil {
		return fmt.Errorf("natsconn: wait claimed: %w", err)
	}
	wrap := func(err error) error {
		if errors.Is(err, ErrClosed) || (ctx.Err() != nil && errors.Is(err, ctx.Err())) {
			return err
		}
		return fmt.Errorf("natsconn: wait claimed %s@%d: %w", subject, rev, err)
	}
	w := &claimWatch{c: c, rev: rev, decided: make(chan struct{})}
	// The watch first: whatever the server stores after the check below
	// reaches it.
	var cc jetstream.ConsumeContext
	// Each wait for the server is bounded as an operation's is.
	sctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	err = c.retry(sctx, func(actx context.Context) error {
		cons, err := c.stream.OrderedConsumer(actx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subject},
			DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:    rev,
		})
		if err != nil {
			return err
		}
		cc, err = cons.Consume(w.observe, jetstream.PullMaxMessages(claimWatchBuffer),
			jetstream.PullExpiry(watchExpiry), jetstream.PullHeartbeat(watchHeartbeat))
		return err
	})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return wrap(err)
	}
	defer cc.Stop()
	gone := time.NewTimer(time.Hour)
	defer gone.Stop()
	for check := true; ; {
		up, closed, since, changed := c.link.state()
		if closed || c.closed.Load() {
			return ErrClosed
		}
		if check && up {
			// At the start and after a reconnect: the subject's last
			// message may have decided already.
			c.step(stepCheck, rev)
			sctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
			f, why, err := c.fateNow(sctx, subject, rev)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return wrap(err)
			}
			// Once the watch has seen the publication it sees, in order,
			// the message that ended it, and decides exactly; the check
			// can only guess (movedOn) about a publication replaced since,
			// and a slow check must not overrule the watch with a guess.
			if !w.saw() {
				w.decide(f, why)
			}
			c.step(stepChecked, rev)
			check = false
		}
		gone.Stop()
		if !up {
			gone.Reset(time.Until(since.Add(c.opts.Timeout)))
		}
		select {
		case <-w.decided:
			if err := w.result(); err != nil {
				return wrap(err)
			}
			c.pending.forget(subject, rev)
			return nil
		case <-changed:
			check = true
		case <-gone.C:
			return wrap(c.unreachable(context.DeadlineExceeded))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// claimStep is a step of WaitClaimed, for the claimStep test hook.
type claimStep int

const (
	stepWatch   claimStep = iota // the watch observed the message at seq, and has not decided on it yet
	stepCheck                    // the check of the subject is about to read it (seq: the publication's)
	stepChecked                  // the check has decided, or left it to the watch
)

func (c *Connector) step(s claimStep, seq uint64) {
	if hook := c.claimStep; hook != nil {
		hook(s, seq)
	}
}

// claimWatchBuffer is the ordered consumer's batch: the first message after
// the publication decides, so a few are plenty.
const claimWatchBuffer = 8

// claimSubject checks that d names a publication of this bucket and
// returns its subject and revision.
func (c *Connector) claimSubject(d connector.Descriptor) (string, uint64, error) {
	if err := d.Validate(); err != nil {
		return "", 0, err
	}
	h := d.Nats
	switch {
	case h == nil:
		return "", 0, fmt.Errorf("%w: not a nats descriptor: %v", descriptor.ErrBad, d)
	case h.Bucket != c.opts.Bucket:
		return "", 0, fmt.Errorf("%w: of bucket %q, not this connector's %q", descriptor.ErrBad, h.Bucket, c.opts.Bucket)
	}
	if _, _, _, err := DecodeKey(h.Key); err != nil {
		return "", 0, fmt.Errorf("%w: %w", descriptor.ErrBad, err)
	}
	return c.prefix + h.Key, h.Revision, nil
}

// fateNow reads the subject's last message on the stream's leader (a
// replica may lag behind a claim) and says what it tells of the
// publication at rev.
func (c *Connector) fateNow(ctx context.Context, subject string, rev uint64) (fate, string, error) {
	var e entry
	var found bool
	err := c.retry(ctx, func(actx context.Context) error {
		var err error
		e, found, err = c.lastOnLeader(actx, subject)
		return err
	})
	switch {
	case err != nil:
		return waiting, "", err
	case !found:
		f, why := c.movedOn(subject, rev)
		return f, why, nil
	case e.seq < rev:
		return waiting, "", fmt.Errorf("%w: revision %d is beyond the entry's last, %d", descriptor.ErrBad, rev, e.seq)
	}
	f, why := c.verdict(subject, rev, e, false)
	return f, why, nil
}

// verdict is what e, a message of the publication's subject at or after
// its revision rev, says of it. after is set when the publication itself
// was seen on the subject and e is the message that followed it.
func (c *Connector) verdict(subject string, rev uint64, e entry, after bool) (fate, string) {
	switch {
	case e.seq < rev:
		return waiting, "" // older than the publication: says nothing
	case e.seq == rev:
		if e.publication() {
			return waiting, ""
		}
		return retired, "not a publication" // another writer's message at that revision
	case e.header.Get(hdrClaimed) != "" && e.header.Get(hdrClaimedRevision) == strconv.FormatUint(rev, 10):
		if by := e.header.Get(hdrRetiredBy); by != "" {
			return retired, "retired by its producer's " + by
		}
		return claimed, ""
	case !after:
		return c.movedOn(subject, rev)
	case e.publication():
		return retired, "replaced by a newer put of its key"
	case e.header.Get(jetstream.MarkerReasonHeader) == "MaxAge":
		return retired, "expired"
	}
	return retired, "removed from the bucket"
}

// movedOn is the fate of a publication whose subject has moved on past it
// unseen: what this connector retired, else claimed (it no longer waits).
func (c *Connector) movedOn(subject string, rev uint64) (fate, string) {
	if by, ok := c.retired.get(subject, rev); ok {
		return retired, "retired by its producer's " + by
	}
	return claimed, ""
}

// claimWatch follows one publication's subject for WaitClaimed.
type claimWatch struct {
	c   *Connector
	rev uint64

	mu      sync.Mutex
	sawPub  bool // the publication itself was delivered
	fate    fate
	why     string
	once    sync.Once
	decided chan struct{} // closed once fate is claimed or retired
}

// observe is the consumer's callback, called for each message in order.
func (w *claimWatch) observe(m jetstream.Msg) {
	e, ok := consumed(m)
	if !ok {
		return
	}
	w.mu.Lock()
	after := w.sawPub
	if e.seq == w.rev && e.publication() {
		w.sawPub = true
	}
	w.mu.Unlock()
	w.c.step(stepWatch, e.seq)
	f, why := w.c.verdict(e.subject, w.rev, e, after)
	w.decide(f, why)
}

// saw reports whether the publication itself was delivered.
func (w *claimWatch) saw() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sawPub
}

// decide records a fate that is final; the first one stays.
func (w *claimWatch) decide(f fate, why string) {
	if f == waiting {
		return
	}
	w.once.Do(func() {
		w.mu.Lock()
		w.fate, w.why = f, why
		w.mu.Unlock()
		close(w.decided)
	})
}

// result is the decided fate as WaitClaimed returns it.
func (w *claimWatch) result() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fate == retired {
		return fmt.Errorf("%w (%s)", ErrRetired, w.why)
	}
	return nil
}

// retiredLimit bounds the retirements a connector remembers.
const retiredLimit = 4096

// retiredSet is what a connector retired, newest retiredLimit: the fate of
// a publication whose marker a later message has replaced.
type retiredSet struct {
	mu    sync.Mutex
	by    map[retiredKey]string
	order []retiredKey // oldest first
}

type retiredKey struct {
	subject string
	seq     uint64
}

func newRetiredSet() *retiredSet { return &retiredSet{by: map[retiredKey]string{}} }

func (s *retiredSet) add(subject string, seq uint64, by string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := retiredKey{subject, seq}
	if _, ok := s.by[k]; !ok {
		s.order = append(s.order, k)
	}
	s.by[k] = by
	if len(s.order) > retiredLimit {
		delete(s.by, s.order[0])
		s.order = s.order[1:]
	}
}

func (s *retiredSet) get(subject string, seq uint64) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	by, ok := s.by[retiredKey{subject, seq}]
	return by, ok
}
