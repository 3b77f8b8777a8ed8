//go:build linux

package connector

// RingMaxPayload exposes the ring's payload limit for key to the tests.
func RingMaxPayload(c *SHM, key string) int { return c.ring.MaxPayload(key) }

// ReceiverFIFOs exposes the wake FIFOs this process reads, to the tests.
var ReceiverFIFOs = receiverFIFOs

// DispatchWork is what the receive dispatcher did so far: ring sweeps
// (one per waited edge and serve), rings scanned under their lock, frames
// claimed from rings, per-key claims tried, checks of every waited key, and
// falls back from the FIFO's Await to polling.
type DispatchWork struct{ Sweeps, RingScans, RingClaims, SegmentTries, FullChecks, AwaitFallbacks int64 }

// Dispatched returns c's dispatcher's work counters (zero without one).
func Dispatched(c *SHM) DispatchWork {
	d := c.dispatcher.Load()
	if d == nil {
		return DispatchWork{}
	}
	s := &d.stats
	return DispatchWork{s.sweeps.Load(), s.ringScans.Load(), s.ringClaims.Load(), s.segmentTries.Load(), s.fullChecks.Load(), s.awaitFallbacks.Load()}
}

// DispatchSettled reports that c's dispatcher has nothing left to serve
// and is not serving: every waiter registered was tried once.
func DispatchSettled(c *SHM) bool {
	d := c.dispatcher.Load()
	return d == nil || d.settled()
}

// OnRecheck has c's receive dispatcher run f(i) before each look at the
// rings of its leader's recheck loop (i counts the looks before one sleep).
// Call it before c's first Recv.
func OnRecheck(c *SHM, f func(i int)) { c.dispatch().recheck = f }

// OnServe has c's receive dispatcher run f as each serve begins (the
// leader then serves every waiter registered before it sleeps). Call it
// before c's first Recv.
func OnServe(c *SHM, f func()) { c.dispatch().onServe = f }

// OnYield has c's dispatcher run f where its leader yields after a serve
// that delivered while others wait, before the yield.
func OnYield(c *SHM, f func()) { c.dispatch().onYield = f }

// RecheckLimit is how many rechecks the leader serves before a sleep.
const RecheckLimit = recheckLimit

// LoseHints has c's receive dispatcher's lock-file watch lose its events
// from now on, as an inotify overflow does.
func LoseHints(c *SHM) { c.dispatch().shmWatch.Remove() }

// DropRecent has c's receive dispatcher forget the keys of the lock files
// closed so far, as when more than it can remember were.
func DropRecent(c *SHM) {
	d := c.dispatch()
	d.mu.Lock()
	d.recent = nil
	d.mu.Unlock()
}

// BreakAwait has the FIFO's Await of c's receive dispatcher fail from now
// on, as when the runtime poller refuses the FIFO: it starts the FIFO's
// background reader (after which Await returns wake.ErrClosed) and ends
// the Await under way.
func BreakAwait(c *SHM) {
	c.waiter.C()
	c.waiter.Interrupt()
}

// FreshCycle returns one round of c's dispatcher's bookkeeping of new
// waiters, with no leader serving: a waiter registers on each of keys, a
// serve takes them in two takes (as one that counted more wakeups than
// frames does), they leave, and the dispatcher, left empty, forgets them.
// Call it before c's first Recv.
func FreshCycle(c *SHM, keys []string) func() {
	d := c.dispatch()
	d.mu.Lock()
	d.leading = true // no Recv leads; Close waits for no lead
	d.mu.Unlock()
	ws := make([]*waiter, 0, len(keys))
	return func() {
		ws = ws[:0]
		for i, key := range keys {
			w, _, _ := d.wait("0", key, nil)
			ws = append(ws, w)
			if i == len(keys)/2 {
				d.take()
			}
		}
		d.take()
		d.untake()
		for _, w := range ws {
			d.cancel(w)
			w.release()
		}
		d.mu.Lock()
		d.forgetLocked()
		d.mu.Unlock()
	}
}

// WakeupsReceived drains c's wakeup FIFO without blocking and returns the
// wakeups it has received so far (0 without a FIFO).
func WakeupsReceived(c *SHM) uint64 {
	if c.waiter == nil {
		return 0
	}
	return c.waiter.Generation()
}
