//go:build linux

package connector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"omnishm/keys"
)

// ErrRetired is wrapped by Claimed and WaitClaimed for a publication this
// connector retired before any receiver claimed it: by Cleanup or
// CleanupPrefix, by a later Put of the same key that replaced it, or by
// Close. The error says which.
var ErrRetired = errors.New("retired before any receiver claimed it")

// ClaimWaiter is a Transport that tells a producer what became of its
// publications. SHM implements it; stream.Sender.Drain needs it.
type ClaimWaiter interface {
	// Claimed reports whether a receiver has claimed the publication d:
	// false while it waits, false with an error wrapping ErrRetired once
	// its producer retired it.
	Claimed(d Descriptor) (bool, error)
	// WaitClaimed blocks until a receiver has claimed d, d was retired
	// (ErrRetired), or ctx ends (ctx.Err()).
	WaitClaimed(ctx context.Context, d Descriptor) error
}

var _ ClaimWaiter = (*SHM)(nil)

// How WaitClaimed polls: a ring frame's claim is a write to shared memory
// that nothing announces, so it backs off from claimPollMin to claimPollMax
// between checks (a check is a few preads, no lock). A per-key claim
// unlinks the segment, which the /dev/shm watch announces; the checks then
// only back up a lost event, from watchedPollMin to watchedPollMax.
const (
	claimPollMin   = 100 * time.Microsecond
	claimPollMax   = 20 * time.Millisecond
	watchedPollMin = 50 * time.Millisecond
	watchedPollMax = time.Second
)

// Claimed reports whether a receiver has claimed the publication d, which
// c.Put returned: false with a nil error while it waits; false with an
// error wrapping ErrRetired once this connector retired it unclaimed
// (Cleanup, CleanupPrefix, a replacing Put, Close). It takes no lock a
// receiver takes, so polling it never makes a receiver's non-blocking lock
// miss.
//
// What it knows beyond shared memory is this connector's own ledger: a
// descriptor of another producer, or a retirement older than the last 4096
// this connector made, reads as claimed once it no longer waits. A per-key
// descriptor names its key, not one generation of it: after a new Put of
// the key it speaks of the new publication. A claim that races the Put
// replacing the publication may be reported as a retirement. After Close
// it reports the fates it learned (a retirement, what Close found for a
// publication someone waited on) and ErrClosed for the rest. A malformed
// descriptor wraps ErrBadDescriptor.
func (c *SHM) Claimed(d Descriptor) (bool, error) {
	id, err := pubOf(d)
	if err != nil {
		return false, fmt.Errorf("connector: claimed: %w", err)
	}
	f, why, err := c.fate(id, d)
	if err == nil && f == retired {
		err = fmt.Errorf("%w (%v)", ErrRetired, why)
	}
	if err != nil {
		return false, claimError("claimed", id, err)
	}
	return f == claimed, nil
}

// WaitClaimed blocks until a receiver has claimed the publication d, which
// c.Put returned, and then returns nil. It returns an error wrapping
// ErrRetired when this connector retires d instead (before or during the
// wait, as Claimed defines it) and ctx.Err() when ctx ends first. A wait
// under way when Close runs learns whether Close found d claimed or
// retired it; after Close the answer is Claimed's (ErrClosed for a fate
// the connector did not learn).
//
// It never busy-waits. A ring frame is checked with a backoff from 100 µs
// to 20 ms (nothing announces a frame's claim); a per-key segment when a
// name leaves /dev/shm (one inotify watch per connector, read through the
// runtime poller, while someone waits), with a slow safety re-check. A
// retirement by this connector wakes its waiters at once.
func (c *SHM) WaitClaimed(ctx context.Context, d Descriptor) error {
	id, err := pubOf(d)
	if err != nil {
		return fmt.Errorf("connector: wait claimed: %w", err)
	}
	c.claims.waitStart(id, d)
	defer c.claims.waitEnd(id)
	backoff, ceiling := claimPollMin, claimPollMax
	watched := false
	if id.seg {
		watched = c.shmWatch.acquire()
		defer c.shmWatch.release()
		if !watched {
			if err := c.shmWatch.failure(); err != nil {
				c.watchFailed("claims of per-key publications", err)
			}
		}
	}
	if watched {
		backoff, ceiling = watchedPollMin, watchedPollMax
	}
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	for {
		// Take the channels before the check: a change after it closes one.
		changed := c.claims.changes()
		var event, others <-chan struct{}
		if watched {
			event, others = c.shmWatch.channels()
		}
		f, why, err := c.fate(id, d)
		switch {
		case err != nil:
			return claimError("wait claimed", id, err)
		case f == claimed:
			return nil
		case f == retired:
			return claimError("wait claimed", id, fmt.Errorf("%w (%v)", ErrRetired, why))
		}
		timer.Reset(backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-others:
		case <-event:
			// This waiter took the watch's notification: pass it on.
			watched = c.shmWatch.fired()
		case <-timer.C:
			backoff = min(backoff*2, ceiling)
		}
		if !watched && ceiling == watchedPollMax {
			backoff, ceiling = claimPollMin, claimPollMax // the watch is gone: poll
		}
	}
}

// fate is what became of the publication id (d): the ledger's answer if it
// has one, else shared memory's. The check holds retireMu for reading, so
// no retirement of this connector can make it see a frame done, or a
// segment gone, before the retirement is noted.
func (c *SHM) fate(id pubID, d Descriptor) (fate, cause, error) {
	c.claims.retireMu.RLock()
	defer c.claims.retireMu.RUnlock()
	switch f, why, decided, closed := c.claims.known(id); {
	case decided:
		return f, why, nil
	case closed:
		return pending, 0, ErrClosed
	}
	done, err := c.sharedDone(id, d)
	if err != nil || !done {
		return pending, 0, err
	}
	// The ring notes a frame it retires before this check can see it done,
	// but without retireMu: a retirement since the first look is noted now.
	if f, why, decided, _ := c.claims.known(id); decided {
		return f, why, nil
	}
	c.claims.observedClaimed(id)
	return claimed, 0, nil
}

// sharedDone reads shared memory alone: the publication no longer waits
// (claimed, or retired by anyone). It takes no lock a receiver takes.
func (c *SHM) sharedDone(id pubID, d Descriptor) (bool, error) {
	if id.seg {
		return c.segments.Claimed(*d.Shm)
	}
	return c.ring.Claimed(*d.HostRing) // this connector's own rings without a system call
}

// claimError adds the connector's context: the operation and the
// publication (a segment's key, a ring frame's ring and position).
func claimError(op string, id pubID, err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	if id.seg {
		return fmt.Errorf("connector: %s %q: %w", op, keys.Shorten(id.name), err)
	}
	return fmt.Errorf("connector: %s %s@%d: %w", op, id.name, id.pos, err)
}

// putTicket carries what Put learned before publishing, for the ledger.
type putTicket struct {
	prev        record
	replacing   bool // the ledger holds an earlier per-key publication of the key
	prevPending bool // ... and it still waited: this put retires it
}

// beginPut admits a put of key into the ledger, or refuses it (ErrClosed)
// once Shutdown or Close began. When the ledger holds an earlier per-key
// publication of the key, it holds retireMu until endPut, and checks first
// whether that one still waits: the put is about to retire it (SPEC §1).
// An earlier ring frame of the key is the ring's to retire and report
// (ringRetired).
func (c *SHM) beginPut(key string) (putTicket, error) {
	prev, replacing, err := c.claims.admit(key)
	if err != nil || !replacing {
		return putTicket{}, err
	}
	c.claims.retireMu.Lock()
	done, err := c.sharedDone(prev.id, prev.descriptor())
	return putTicket{prev: prev, replacing: true, prevPending: err == nil && !done}, nil
}

// endPut settles an admitted put: it records the publication d it made
// (err nil) and what it retired.
func (c *SHM) endPut(key string, t putTicket, d Descriptor, err error) {
	c.claims.settle(key, t, d, err == nil, c.segments.Pending)
	if t.replacing {
		c.claims.retireMu.Unlock()
	}
}

// cancelRing retires this connector's ready ring frames of key (prefix
// false) or of the keys prefix selects, the ring noting each with why
// (ringRetired); the number retired.
func (c *SHM) cancelRing(s string, prefix bool, why cause) int {
	c.claims.cancelMu.Lock()
	defer c.claims.cancelMu.Unlock()
	c.claims.cancelCause = why
	if prefix {
		return c.ring.CancelPrefix(s)
	}
	return c.ring.Cancel(s)
}

// retire is Cleanup's work: it retires key on both paths, notes in the
// ledger what it retired, and returns the ring frames and whether a
// segment.
func (c *SHM) retire(key string) (frames int, seg bool) {
	c.claims.retireMu.Lock()
	defer c.claims.retireMu.Unlock()
	frames, seg, _ = c.retireKey(key, byCleanup)
	return frames, seg
}

// retireKey retires key on both paths and notes it in the ledger; noted
// reports that the key's recorded publication was among what it retired.
// retireMu is held.
func (c *SHM) retireKey(key string, why cause) (frames int, seg, noted bool) {
	frames = c.cancelRing(key, false, why)
	seg = c.cleanupSegment(key)
	return frames, seg, c.claims.retiredKey(key, seg, why)
}

// retirePrefix is CleanupPrefix's work: the per-key keys the ledger holds
// one by one, so it knows which publication each retirement retired, then
// the packages' own prefix cleanups for anything it does not hold (the
// ring notes what it retires).
func (c *SHM) retirePrefix(prefix string) int {
	c.claims.retireMu.Lock()
	defer c.claims.retireMu.Unlock()
	n := 0
	for _, k := range c.claims.keysWithPrefix(prefix) {
		frames, seg, _ := c.retireKey(k, byCleanup)
		n += frames
		if seg {
			n++
		}
	}
	m, err := c.segments.CleanupPrefix(prefix)
	if err != nil {
		c.log.Warn("omnishm: cleanup failed", "prefix", prefix, "err", err)
	}
	return n + m + c.cancelRing(prefix, true, byCleanup)
}

// closeClaims is Close's part: before the packages retire everything, it
// retires, key by key, the per-key publications someone waits on, so each
// waiter learns whether Close found its publication claimed or retired it.
// It closes the ring, which notes each frame it retires (ringRetired): a
// waited frame it did not retire was claimed, or is another producer's,
// which its file tells. Then it closes the ledger (waking every waiter)
// and the /dev/shm watch. Close's own ring.Close, after, finds it closed.
func (c *SHM) closeClaims() error {
	c.claims.retireMu.Lock()
	var found []pubID
	frames := map[pubID]Descriptor{}
	for id, w := range c.claims.waited() {
		if _, _, decided, _ := c.claims.known(id); decided {
			continue
		}
		if !id.seg {
			frames[id] = w.d
			continue
		}
		if r, ok := c.claims.record(id.name); ok && r.id == id {
			if _, _, noted := c.retireKey(id.name, byClose); !noted {
				found = append(found, id)
			}
			continue
		}
		// Not a publication the ledger holds: it no longer waits, or it is
		// not this connector's. Only the first is an answer.
		if done, err := c.sharedDone(id, w.d); err == nil && done {
			found = append(found, id)
		}
	}
	ringErr := c.ring.Close()
	for id, d := range frames {
		if _, _, decided, _ := c.claims.known(id); decided {
			continue // retired by the ring's Close
		}
		// This connector's ring file is gone now: its frame reads claimed.
		if done, err := c.sharedDone(id, d); err == nil && done {
			found = append(found, id)
		}
	}
	c.claims.close(found)
	c.claims.retireMu.Unlock()
	return errors.Join(ringErr, c.shmWatch.close())
}

// unsettled is the ledger's unsettled with, once every admitted put has
// settled, this connector's ring frames that still wait (the ring's own
// record of them) among the records.
func (c *SHM) unsettled() (int, []record) {
	n, records := c.claims.unsettled()
	if n > 0 {
		return n, nil
	}
	for _, h := range c.ring.Unclaimed() {
		records = append(records, record{id: pubID{name: h.Name, pos: h.Position}, size: h.Size})
	}
	return 0, records
}
