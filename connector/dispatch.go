//go:build linux

package connector

import (
	"bytes"
	"context"
	"encoding/binary"
	"iter"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/frame"
	"omnishm/fswatch"
	"omnishm/ring"
	"omnishm/scope"
)

// The receive dispatcher: one goroutine per connector at a time, its
// leader, waits for change on behalf of every Recv, so a stage waiting on
// a thousand keys holds no thread and makes no system call per waiter. The
// leader is the Recv that found none (it serves every waiter until its own
// result is there: one message in flight costs no goroutine hand-off),
// then a goroutine of the dispatcher's while others wait; none while
// nothing waits (see lead). It wakes on
//
//   - the stage's wakeup FIFO (SPEC §8), read by the leader itself through
//     the runtime poller (wake.Receiver.Await):
//     it then sweeps each attached ring of every waited edge once, claiming
//     the frames whose keys have waiters;
//   - the ring's Changes (a new producer, a producer's exit);
//   - a new waiter, whose key it tries once at once;
//   - one timer: one connector-wide safety re-poll of the rings and of
//     every waited key, which backs off from PollInterval to 16 times it
//     while it finds nothing unannounced (for producers that send no
//     wakeups or hints); without a wakeup FIFO the rings are also polled
//     (cheap: an atomic load per ring) at least every PollInterval.
//
// Per-key publications are found through lock-file hints: a per-key
// producer closes shm_{key}_lockfile.lock, opened for writing, after
// publishing (SPEC §6), and inotify on /dev/shm names the key; only a
// waited key's segment is then tried. The hints are read when a wakeup
// brought no ring frame, and at each poll. Every waited key is tried on
// its per-key path only on an inotify overflow, on a wakeup that brought
// no event (no ring frame, no lock file closed: counted per serve, the
// wakeups since the last one against what it found), and in that safety
// re-poll. Hints and wakeups are never proof: a try that misses costs one
// stat.
//
// A new waiter's key costs no stat either while the watch can vouch for
// it (recent): the dispatcher remembers the keys nobody here waited for
// when their lock file was closed, and those whose lock file /dev/shm
// listed just after the watch started; a key outside that set has no
// segment that a producer following SPEC §6 published, so only the keys in
// it are tried (after reading the events queued by then). On an overflow,
// or once the set holds maxRecent keys, every new waiter's key is tried
// again until a listing of /dev/shm rebuilds the set.

// fullCheckBackoff bounds the safety re-poll of every waited key at this
// many PollIntervals.
const fullCheckBackoff = 16

// busyRetry is the first delay before a sweep is retried after a ring's
// lock was held by another process (SPEC §3: contention is a miss).
const busyRetry = 200 * time.Microsecond

// recheckLimit bounds the serves run, before a sleep, for frames found
// after the sleep was announced (see run).
const recheckLimit = 4

// minRingPoll is the first ring poll interval without a wakeup FIFO.
const minRingPoll = 100 * time.Microsecond

// maxRecent bounds the keys the dispatcher remembers closed lock files of
// (recent): beyond it, new waiters' keys are stat'ed until a relisting.
const maxRecent = 4096

type waitState int32

const (
	waiting  waitState = iota // in keys, to be served
	reserved                  // taken out of keys: a claim for it is under way
	finished                  // its result is in ch
)

// waiter is one Recv parked on its channel. Waiters are recycled
// (waiterPool): a Recv that had its result hands its waiter back, so a
// delivery allocates neither the waiter nor its channel.
type waiter struct {
	from, key string
	alloc     frame.Allocator // RecvInto's supplied memory; nil for Recv
	ch        chan result     // the one result, buffered
	// A waitState: written under dispatcher.mu, but for finished with a
	// result (the waiter is out of keys by then), hence atomic.
	state atomic.Int32
	// Under dispatcher.mu:
	cancelled bool    // its Recv gave up while a claim for it was under way
	next      *waiter // the next waiter of its key, in arrival order
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan result, 1)} }}

// release hands back the waiter of a Recv that received its result: the
// dispatcher holds it nowhere any more (fresh holds copies of its key).
func (w *waiter) release() {
	*w = waiter{ch: w.ch}
	waiterPool.Put(w)
}

// waitKey is a new waiter's edge and key, as serve reads them: a copy,
// since its waiter may be served, handed back and reused meanwhile.
type waitKey struct{ from, key string }

type result struct {
	msg Message
	err error
	ok  bool // false: a claim under way for a cancelled waiter missed
}

// dispatchStats count the dispatcher's work, for tests that check that a
// put wakes only its own waiter, and its falls back from the FIFO's Await
// to polling.
type dispatchStats struct {
	sweeps, ringScans, ringClaims, segmentTries, fullChecks, awaitFallbacks atomic.Int64
}

type dispatcher struct {
	c        *SHM
	to       string
	fifo     bool          // the stage has a wakeup FIFO (c.waiter): Interrupt ends the leader's Await
	interval time.Duration // PollInterval

	mu     sync.Mutex
	keys   map[string]*waiter // waiting, by key: the first to arrive (its next the others)
	count  atomic.Int64       // the waiters in keys (written under mu)
	edges  map[string]int     // waiting per edge from->to
	fresh  []waitKey          // registered since the last serve; its buffer is kept
	hinted []string           // waited keys whose lock file was closed since
	// recent: keys not waited when their lock file was closed since the
	// hint watch started, or whose lock file was listed just after it
	// started; nil while it cannot vouch for every key (no watch, events
	// lost, more than maxRecent keys). See freshTries.
	recent   map[string]struct{}
	closed   bool
	hints    uint64 // lock files of any key closed (read by syncHints)
	leading  bool   // a goroutine runs lead
	sleeping bool   // the leader sleeps (or is about to) and no new waiter nudged it yet

	kick    chan struct{} // fresh waiters or hinted keys
	stop    chan struct{}
	leaders sync.WaitGroup // lead and forward
	// The leader is in serve, and serves every waiter registered
	// meanwhile before it sleeps (Recv then leaves its ring try to it;
	// tests wait for it to settle).
	serving atomic.Bool

	// The hint watch; nil when /dev/shm cannot be watched.
	shm      *fswatch.Watcher
	shmWatch *fswatch.Watch

	// The leader's own.
	await                           bool            // sleep in the FIFO's Await and announce it, else poll the rings in a select
	timer                           *time.Timer     // the select's
	changes                         <-chan struct{} // the ring's Changes, for the select
	next                            time.Time       // when to look again
	ringEvery, fullEvery, busyEvery time.Duration
	ringAt, fullAt, busyAt          time.Time // zero: not scheduled; ringAt only without Await
	reservedNow                     []*waiter
	taken                           []waitKey       // the fresh the serve under way took (take)
	edgeBuf                         []string        // unswept's
	takeEdges, keyBuf, tryBuf       []string        // take's, sweepEdges', freshTries'
	candBuf                         []string        // segmentCandidates'
	direntBuf, shmNames             []byte          // segmentCandidates' listing (listShmInto)
	seen                            map[string]bool // trySegments'

	wakeFullAt time.Time     // the last full check for a wakeup without an event
	wakes      atomic.Uint64 // the FIFO's wakeups served so far

	stats   dispatchStats
	recheck func(i int) // tests: run before each look of lead's recheck loop
	onServe func()      // tests: run as each serve begins
	onYield func()      // tests: run where the leader yields after a serve (serveYield), before it does
}

// dispatch returns the connector's dispatcher, started on first use; nil
// once the connector is closed.
func (c *SHM) dispatch() *dispatcher {
	c.dispatchOnce.Do(func() {
		if c.closed.Load() {
			return
		}
		d := &dispatcher{
			c: c, to: string(c.opts.StageID), interval: c.opts.PollInterval,
			keys: map[string]*waiter{}, edges: map[string]int{},
			kick: make(chan struct{}, 1), stop: make(chan struct{}),
		}
		// run announces each sleep: Open counted them from the start.
		d.fifo = c.waiter != nil
		d.ringEvery, d.fullEvery = min(minRingPoll, d.interval), d.interval
		d.watchHints()
		if d.await = d.fifo; d.await {
			d.leaders.Add(1)
			go d.forward(c.ring.Changes())
		} else {
			d.changes = c.ring.Changes()
			d.timer = time.NewTimer(time.Hour)
			d.timer.Stop()
		}
		c.dispatcher.Store(d)
	})
	return c.dispatcher.Load()
}

// watchHints starts the lock-file watch on /dev/shm. It is passive: its
// events are read when the dispatcher wakes anyway (a wakeup it cannot
// explain otherwise, a poll), so other processes' traffic in /dev/shm
// wakes nobody here; a per-key put that wakes the stage has its hint read
// at once, one that does not at the next poll. Without the watch (no
// inotify), per-key publications are found by wakeups and the safety
// re-poll, which then does not back off.
func (d *dispatcher) watchHints() {
	w, err := fswatch.New(false)
	if err != nil {
		d.c.watchFailed("per-key hints", err)
		return
	}
	x, err := w.AddNamed(scope.ShmDir, unix.IN_CLOSE_WRITE, d.hint)
	if err != nil {
		w.Close()
		d.c.watchFailed("per-key hints", err)
		return
	}
	d.shm, d.shmWatch = w, x
	d.relist()
}

// hint runs in syncHints for each file closed after writing in /dev/shm.
func (d *dispatcher) hint(name []byte) {
	key, ok := scope.LockKey(string(name))
	if !ok {
		return
	}
	d.mu.Lock()
	d.hints++
	_, waited := d.keys[key]
	if waited {
		d.hinted = append(d.hinted, key)
	} else {
		d.rememberLocked(key)
	}
	d.mu.Unlock()
	if waited {
		d.nudge()
	}
}

// rememberLocked adds key to recent, which it drops once full; d.mu is
// held.
func (d *dispatcher) rememberLocked(key string) {
	if d.recent == nil {
		return
	}
	if len(d.recent) >= maxRecent {
		d.recent = nil // a relisting at a full check rebuilds it
		return
	}
	d.recent[key] = struct{}{}
}

// relist rebuilds recent from the lock files /dev/shm lists now, the hint
// watch being up: a segment published before the watch started has its
// lock file there (SPEC §6: the lock file is made before the segment and
// removed after it), one published since has its close queued or seen.
// Hints read during the listing land in the new set.
func (d *dispatcher) relist() {
	d.mu.Lock()
	d.recent = map[string]struct{}{}
	d.mu.Unlock()
	_, names, err := listShmInto(nil, nil)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.recent = nil
		return
	}
	for name := range eachName(names) {
		if key, ok := scope.LockKey(string(name)); ok {
			d.rememberLocked(key)
		}
	}
}

// eachName yields the names of a listing of listShmInto.
func eachName(names []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for len(names) > 0 {
			i := bytes.IndexByte(names, 0)
			if !yield(names[:i]) {
				return
			}
			names = names[i+1:]
		}
	}
}

// listShmInto appends the names in /dev/shm to names, each followed by a
// NUL, reading the directory through dirent; it returns both buffers, to
// be kept: a listing that allocates nothing per entry, so a check of every
// waited key makes no garbage however many files /dev/shm holds (other
// stages', other tests'), where Readdirnames made a string per entry.
func listShmInto(dirent, names []byte) ([]byte, []byte, error) {
	fd, err := unix.Open(scope.ShmDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return dirent, names, err
	}
	defer unix.Close(fd)
	if cap(dirent) < 8<<10 {
		dirent = make([]byte, 8<<10)
	}
	dirent = dirent[:cap(dirent)]
	for {
		n, err := unix.ReadDirent(fd, dirent)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return dirent, names, err
		}
		// linux_dirent64: ino (8 bytes), off (8), reclen (2), type (1),
		// then the NUL-terminated name, padded to reclen.
		const nameAt = 19
		for b := dirent[:n]; len(b) > nameAt; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen <= nameAt || reclen > len(b) {
				break
			}
			name := b[nameAt:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			names = append(append(names, name...), 0)
			b = b[reclen:]
		}
	}
}

// nudge wakes run for fresh waiters, hinted keys or the ring's Changes.
func (d *dispatcher) nudge() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
	if d.fifo {
		d.c.waiter.Interrupt() // run may be in Await
	}
}

// wait registers a waiter for key on edge from->d.to; ErrClosed once the
// dispatcher stopped. With lead set, no goroutine leads: the caller must
// run lead(w, ctx) itself.
func (d *dispatcher) wait(from, key string, a frame.Allocator) (w *waiter, lead bool, err error) {
	w = waiterPool.Get().(*waiter)
	w.from, w.key, w.alloc = from, key, a
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		w.release()
		return nil, false, ErrClosed
	}
	d.addLocked(w)
	d.fresh = append(d.fresh, waitKey{from, key})
	if lead = !d.leading; lead {
		d.leading = true
		d.leaders.Add(1)
	}
	nudge := d.sleeping && !lead
	d.sleeping = false // one nudge per sleep
	d.mu.Unlock()
	if nudge {
		d.nudge()
	}
	return w, lead, nil
}

// cancel takes back a waiter whose Recv ends. If a claim for it is under
// way, cancel waits for it: what was claimed for w (a payload, or its
// decode error) is returned with claimed set, never dropped.
func (d *dispatcher) cancel(w *waiter) (r result, claimed bool) {
	d.mu.Lock()
	switch waitState(w.state.Load()) {
	case waiting:
		d.removeLocked(w)
		w.state.Store(int32(finished))
		d.mu.Unlock()
		return result{}, false
	case reserved:
		w.cancelled = true
	}
	d.mu.Unlock()
	r = <-w.ch
	return r, r.ok || r.err != nil
}

// addLocked puts w last among its key's waiters.
func (d *dispatcher) addLocked(w *waiter) {
	p := d.keys[w.key]
	if p == nil {
		d.keys[w.key] = w
	} else {
		for p.next != nil {
			p = p.next
		}
		p.next = w
	}
	d.edges[w.from]++
	d.count.Add(1)
}

// removeLocked takes a waiting w out of keys and edges.
func (d *dispatcher) removeLocked(w *waiter) {
	switch head := d.keys[w.key]; {
	case head == w && w.next == nil:
		delete(d.keys, w.key)
	case head == w:
		d.keys[w.key] = w.next
	default:
		for p := head; p != nil; p = p.next {
			if p.next == w {
				p.next = w.next
				break
			}
		}
	}
	w.next = nil
	if d.edges[w.from]--; d.edges[w.from] <= 0 {
		delete(d.edges, w.from)
	}
	d.count.Add(-1)
}

// reserveLocked takes the first waiter of key (of edge from->d.to, or of
// any edge when from is "") out of keys: a claim for it begins.
func (d *dispatcher) reserveLocked(from, key string) *waiter {
	for w := d.keys[key]; w != nil; w = w.next {
		if from == "" || w.from == from {
			d.removeLocked(w)
			w.state.Store(int32(reserved))
			return w
		}
	}
	return nil
}

// finish completes a reserved waiter: with the claim's result, or, when it
// missed, back to the head of its key's waiters (or done, if its Recv gave
// up meanwhile).
func (d *dispatcher) finish(w *waiter, r result) {
	if r.ok || r.err != nil {
		// No lock: w is out of keys, and a cancel that saw it reserved
		// waits for this.
		w.state.Store(int32(finished))
		w.ch <- r
		return
	}
	d.mu.Lock()
	if !w.cancelled {
		w.state.Store(int32(waiting))
		w.next = d.keys[w.key]
		d.keys[w.key] = w
		d.edges[w.from]++
		d.count.Add(1)
		d.mu.Unlock()
		return
	}
	w.state.Store(int32(finished))
	d.mu.Unlock()
	w.ch <- r // outside mu: a cancel that sees finished waits for it
}

// lead runs the dispatcher's loop: it sleeps until something changes, then
// serves every waiter that change may concern. One goroutine at a time
// leads (d.leading): the Recv whose waiter found no leader, until its own
// result is there or its ctx ends (own, ctx), so that one message in flight
// reaches its Recv straight from the runtime poller, with no goroutine
// hand-off; then, if others still wait, a goroutine of its own (own nil)
// until nothing waits. With a wakeup FIFO the leader sleeps in the FIFO's
// Await: kicks, the ring's Changes (through forward), stop and the timer's
// deadline interrupt it. The caller holds one count of d.leaders.
func (d *dispatcher) lead(own *waiter, ctx context.Context) {
	defer d.leaders.Done()
	// A new leader first serves what came while nobody led (no kick
	// tells it): the new waiters, its own.
	d.serveYield(false, false)
	for {
		if d.handOver(own, ctx) {
			return
		}
		woke, ticked := false, false
		// Producers skip the wakeup of a ring frame while this receiver
		// announces no sleep (wake.Notifier.NotifyRing): announce it, then
		// look once more at the rings (atomics, no system call) for a frame
		// published before the announcement, and serve it instead of
		// sleeping. A few times in a row at most: a ring whose lock another
		// process holds stays unswept (the busy timer retries it), and
		// under a steady stream the count up means the next put writes.
		asleep := d.await && d.count.Load() > 0
		for i := 0; asleep; i++ {
			if d.recheck != nil {
				d.recheck(i)
			}
			d.c.waiter.BeginSleep()
			if !d.unswept() {
				break
			}
			if i == recheckLimit {
				// Still unswept: a ring's lock is held (the busy retry is
				// scheduled), discovery is due, or a frame was put while
				// the count was down (the last serve) and skipped its
				// wakeup. Serve once more with the sleep announced: what
				// was put before the announcement is found now, and what
				// is put after it writes the FIFO.
				d.serveYield(true, false)
				if d.handOver(own, ctx) {
					d.c.waiter.EndSleep()
					return
				}
				break
			}
			d.c.waiter.EndSleep()
			// As for a wakeup: one written meanwhile is served with it.
			d.serveYield(true, false)
			if d.handOver(own, ctx) {
				return
			}
			asleep = d.count.Load() > 0
		}
		stopped := false
		if !d.sleep() {
			// New waiters came during the serve (they nudge only a
			// leader that sleeps): serve them first.
		} else if d.await {
			select {
			case <-d.stop:
				stopped = true
			default:
				var interrupted bool
				var err error
				woke, interrupted, err = d.c.waiter.Await(d.next)
				ticked = !woke && !interrupted && err == nil
				if err != nil {
					// The poller refused the FIFO: poll as without one
					// (Close stops the leader before it closes the FIFO).
					d.c.log.Debug("omnishm: receive wait", "err", err)
					d.stats.awaitFallbacks.Add(1)
					d.await, d.changes = false, d.c.ring.Changes()
					d.timer = time.NewTimer(d.interval)
				}
				// Kicks up to here are served now; a later one's
				// Interrupt ends the next Await at once.
				select {
				case <-d.kick:
				default:
				}
			}
		} else {
			select {
			case <-d.stop:
				stopped = true
			case <-d.kick:
			case <-d.changes:
			case <-d.timer.C:
				ticked = true
			}
		}
		d.mu.Lock()
		d.sleeping = false
		d.mu.Unlock()
		if asleep {
			d.c.waiter.EndSleep()
		}
		if stopped {
			return
		}
		d.serveYield(woke, ticked)
	}
}

// serveYield serves, then yields the CPU before the serve counts as over:
// the waiters it delivered to run first, and those that wait again
// register while a serve is under way, leaving their ring try to it.
func (d *dispatcher) serveYield(woke, ticked bool) {
	d.serving.Store(true)
	claims := d.stats.ringClaims.Load()
	d.schedule(d.serve(woke, ticked))
	if d.stats.ringClaims.Load() != claims && d.count.Load() > 0 {
		if d.onYield != nil {
			d.onYield()
		}
		// One yield lets the woken waiters run first most of the time,
		// not always: the scheduler takes the leader back from the global
		// queue now and then (one pick in 61), and with more Ps a woken
		// waiter may run elsewhere, after the serve. Either way it then
		// claims its frame itself, as before: a heuristic, never a miss.
		runtime.Gosched()
	}
	d.serving.Store(false)
}

// sleep reports that the leader may sleep: no new waiter came since the
// last serve. From then on until it wakes, the next new waiter nudges it.
func (d *dispatcher) sleep() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sleeping = len(d.fresh) == 0
	return d.sleeping
}

// handOver reports that the leader leaves the loop: a Recv's (own) whose
// result is there or whose ctx ended (its Recv then takes its waiter back),
// or a goroutine's when nothing waits; and on stop. A Recv that leaves
// while others wait passes the lead to a goroutine.
func (d *dispatcher) handOver(own *waiter, ctx context.Context) bool {
	select {
	case <-d.stop:
		return true
	default:
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if own == nil {
		if d.count.Load() > 0 || len(d.fresh) > 0 || len(d.hinted) > 0 {
			return false
		}
		d.forgetLocked()
		d.leading = false
		return true
	}
	if waitState(own.state.Load()) != finished && ctx.Err() == nil {
		return false
	}
	if d.count.Load() == 0 || waitState(own.state.Load()) == waiting && d.count.Load() == 1 {
		// Nothing else waits: what fresh and hinted still hold is of
		// waiters gone (or own's, taken back by its Recv).
		d.forgetLocked()
		d.leading = false
		return true
	}
	d.leaders.Add(1)
	go d.lead(nil, nil)
	return true
}

// forgetLocked drops the fresh waiters and hinted keys of a dispatcher
// nobody waits in, remembering the hinted keys in recent for the waiter a
// later Recv of the key makes; d.mu is held.
func (d *dispatcher) forgetLocked() {
	for _, key := range d.hinted {
		d.rememberLocked(key)
	}
	clear(d.fresh)
	d.fresh, d.hinted = d.fresh[:0], nil
}

// schedule sets when the leader looks again at the latest (zero: only on
// an event).
func (d *dispatcher) schedule(next time.Time) {
	d.next = next
	if d.timer != nil {
		d.reschedule(d.timer, next)
	}
}

// forward turns the ring's Changes into kicks while the leader sleeps in
// Await, until stop.
func (d *dispatcher) forward(changes <-chan struct{}) {
	defer d.leaders.Done()
	for {
		select {
		case <-changes:
			d.nudge()
		case <-d.stop:
			return
		}
	}
}

// reschedule sets timer to next (zero: stopped).
func (d *dispatcher) reschedule(timer *time.Timer, next time.Time) {
	timer.Stop()
	if !next.IsZero() {
		timer.Reset(time.Until(next))
	}
}

// unswept reports whether a waited edge's rings may hold frames the last
// sweep did not offer (ring.Transport.Unswept): no system call.
func (d *dispatcher) unswept() bool {
	if d.c.ring.Capacity() == 0 || !numeric(d.to) {
		return false
	}
	d.mu.Lock()
	edges := d.edgeBuf[:0]
	for from := range d.edges {
		edges = append(edges, from)
	}
	d.edgeBuf = edges
	d.mu.Unlock()
	for _, from := range edges {
		if numeric(from) && d.c.ring.Unswept(from, d.to) {
			return true
		}
	}
	return false
}

// serve does what a wakeup (woke), the ring's Changes, a new waiter or the
// timer (ticked) asks for, and returns when to look again (zero: only on
// an event).
func (d *dispatcher) serve(woke, ticked bool) time.Time {
	if d.onServe != nil {
		d.onServe()
	}
	if ticked {
		d.syncHints() // the per-key puts that sent no wakeup
		d.c.noteNotifierWatch()
	}
	now := time.Now()
	var wakes uint64
	if woke {
		// Counted before the sweep: a producer publishes, then wakes (SPEC
		// §8), so every wakeup counted here has its event visible by then.
		total := d.c.waiter.Seen()
		wakes = total - d.wakes.Swap(total)
	}
	fresh, hinted, edges := d.take()
	defer d.untake()
	if edges == nil {
		d.ringAt, d.fullAt, d.busyAt = time.Time{}, time.Time{}, time.Time{}
		return time.Time{}
	}
	if len(fresh) > 0 && !d.await {
		d.ringEvery = min(minRingPoll, d.interval) // new waiters: poll closely again
	}
	// A lost hint watch (an overflow dropped events) may have dropped a
	// waited key's hint: watch again and try every waited key.
	lost := d.shm != nil && d.shmWatch.Lost()
	if lost {
		d.rewatchHints()
	}
	full := lost || due(d.fullAt, now)
	all := full || due(d.busyAt, now)
	if full && !lost && d.shm != nil && d.recentLost() {
		d.relist() // recent filled up since the last one
	}

	// The rings: one sweep per waited edge, each ring locked at most once.
	frames, busy := d.sweepEdges(edges, fresh, all)
	if uint64(frames) < wakes {
		// More wakeups than ring frames: per-key puts, whose lock files
		// were closed before they woke us, or a producer new to the edge.
		// Apply both now and look again.
		d.c.ring.Refresh()
		hints := d.syncHints()
		f, more, e := d.take()
		fresh, hinted = d.taken, append(hinted, more...) // f is the end of d.taken
		if e != nil {
			edges = e
		}
		n, b := d.sweepEdges(edges, f, all)
		frames, busy = frames+n, busy || b
		if uint64(frames)+hints < wakes {
			// Still short: a producer whose hint was lost, or one that
			// sends none. Try every waited key, at most once per
			// PollInterval.
			if now.Sub(d.wakeFullAt) >= d.interval {
				full, d.wakeFullAt = true, now
			} else if next := d.wakeFullAt.Add(d.interval); d.fullAt.IsZero() || next.Before(d.fullAt) {
				d.fullAt = next
			}
		}
	}

	// The per-key path: new waiters' keys, hinted keys, or all of them.
	var tries []string
	if full {
		tries = d.segmentCandidates()
		d.stats.fullChecks.Add(1)
	} else {
		tries = append(d.freshTries(fresh), hinted...)
	}
	found := d.trySegments(tries)

	// When to look again. Without a wakeup FIFO the rings are polled,
	// closely at first. The safety re-poll (the rings, and every waited
	// key's segment) backs off while it finds nothing that no wakeup or
	// hint announced, and comes back to PollInterval when it does: such a
	// producer exists.
	if !d.await && (due(d.ringAt, now) || d.ringAt.IsZero() || len(fresh) > 0) {
		d.ringAt = now.Add(d.ringEvery)
		d.ringEvery = min(d.ringEvery*2, d.interval)
	}
	if full || d.fullAt.IsZero() {
		switch {
		case d.shm == nil, full && (found || !woke && frames > 0):
			d.fullEvery = d.interval
		case full:
			d.fullEvery = min(d.fullEvery*2, fullCheckBackoff*d.interval)
		}
		d.fullAt = now.Add(d.fullEvery)
	}
	switch {
	case busy && (all || d.busyAt.IsZero()):
		d.busyEvery = min(max(busyRetry, d.busyEvery*2), d.interval)
		d.busyAt = now.Add(d.busyEvery)
	case !busy && all:
		// Only a sweep of every waited key ends the retries: one for new
		// waiters alone may not have met the ring that was busy, and a
		// wakeup's looks only at new frames, not at the indexed frame a
		// busy sweep failed to offer a new waiter.
		d.busyAt, d.busyEvery = time.Time{}, 0
	}
	next := d.fullAt
	for _, t := range []time.Time{d.ringAt, d.busyAt} {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	return next
}

// take hands serve what arrived since it last looked: the new waiters
// (appended to d.taken, the leader's own, until untake), the hinted keys,
// and the waited edges (nil when nothing waits). The new waiters are
// copied out, so both buffers are kept for good: handing d.fresh itself
// over left it to a serve that took twice or to a leader that left (which
// dropped it), and the next thousand waiters grew a new one from nothing,
// in the waiters' own goroutines.
func (d *dispatcher) take() (fresh []waitKey, hinted []string, edges []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.taken)
	d.taken = append(d.taken, d.fresh...)
	fresh, hinted = d.taken[n:], d.hinted
	clear(d.fresh)
	d.fresh, d.hinted = d.fresh[:0], nil
	if len(d.keys) > 0 {
		edges = d.takeEdges[:0]
		for from := range d.edges {
			edges = append(edges, from)
		}
		d.takeEdges = edges
	}
	return fresh, hinted, edges
}

// untake empties d.taken, once serve has read it, for the next serve.
func (d *dispatcher) untake() {
	clear(d.taken)
	d.taken = d.taken[:0]
}

// sweepEdges sweeps the rings of each waited edge once, looking up the new
// waiters' keys in the rings' indexes (every waited key when all is set).
// It returns the frames published since the last sweep, and reports a ring
// whose lock was held by another process.
func (d *dispatcher) sweepEdges(edges []string, fresh []waitKey, all bool) (frames int, busy bool) {
	if d.c.ring.Capacity() == 0 || !numeric(d.to) {
		return 0, false
	}
	for _, from := range edges {
		if !numeric(from) {
			continue
		}
		var keys []string
		if all {
			keys = d.waitedKeys(d.keyBuf[:0], from)
			d.keyBuf = keys
		} else {
			keys = freshKeys(d.keyBuf[:0], fresh, from)
			d.keyBuf = keys
		}
		n, b := d.sweep(from, keys)
		frames, busy = frames+n, busy || b
	}
	return frames, busy
}

func due(at, now time.Time) bool { return !at.IsZero() && !now.Before(at) }

// freshKeys appends to keys those of the new waiters of edge from->d.to.
func freshKeys(keys []string, fresh []waitKey, from string) []string {
	for _, w := range fresh {
		if w.from == from {
			keys = append(keys, w.key)
		}
	}
	return keys
}

// waitedKeys appends to keys the keys waited on edge from->d.to (on any
// edge when from is ""). Callers pass a buffer of their own, kept across
// serves: a safety re-poll of idle waiters allocates nothing, so it never
// brings on a collection, which scans every parked waiter's stack.
func (d *dispatcher) waitedKeys(keys []string, from string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, first := range d.keys {
		for w := first; w != nil; w = w.next {
			if from == "" || w.from == from {
				keys = append(keys, key)
				break
			}
		}
	}
	return keys
}

// listWaiters is how many waited keys make one listing of /dev/shm
// cheaper than a stat per key in a check of every waited key.
const listWaiters = 64

// segmentCandidates are the waited keys whose segment may be there: every
// one, or, when many wait, those /dev/shm lists now (one listing instead of
// a stat per key; a segment made during it is found at the next check).
func (d *dispatcher) segmentCandidates() []string {
	keys := d.candBuf[:0]
	defer func() { d.candBuf = keys }()
	if d.count.Load() > listWaiters {
		var err error
		d.direntBuf, d.shmNames, err = listShmInto(d.direntBuf, d.shmNames[:0])
		if err == nil {
			d.mu.Lock()
			defer d.mu.Unlock()
			for name := range eachName(d.shmNames) {
				if w := d.keys[string(name)]; w != nil {
					keys = append(keys, w.key) // the waiter's string: no copy
				}
			}
			return keys
		}
	}
	keys = d.waitedKeys(keys, "")
	return keys
}

// sweep claims, from the rings of edge from->d.to, the new frames whose
// keys have waiters and the indexed frames of keys, and hands each to its
// waiter. It returns the frames published since the last sweep, and
// reports a ring whose lock was held by another process.
func (d *dispatcher) sweep(from string, keys []string) (frames int, busy bool) {
	d.stats.sweeps.Add(1)
	reserved := d.reservedNow[:0]
	want := func(key string) bool {
		d.mu.Lock()
		w := d.reserveLocked(from, key)
		d.mu.Unlock()
		if w != nil {
			reserved = append(reserved, w)
		}
		return w != nil
	}
	next := 0
	deliver := func(key string, got ring.Taken, err error) {
		w := reserved[next] // deliveries come in want's order
		next++
		// Counted before its waiter has it, not after Sweep returns: one
		// who reads the count once its Recv returned sees this claim.
		d.stats.ringClaims.Add(1)
		if err != nil {
			d.finish(w, result{err: keyError("recv", key, err)})
			return
		}
		d.c.stats.got(from, d.to, PathRing, got.Size) // stats, as getRing counts
		d.finish(w, result{msg: Message{Payload: got.Value, Size: got.Size, Producer: got.Producer}, ok: true})
	}
	// Sweep decodes each frame right after want reserved its waiter.
	decode := func(kind ring.Kind, payload []byte) (any, error) {
		return decodeWith(reserved[len(reserved)-1].alloc, kind, payload)
	}
	st, err := d.c.ring.Sweep(from, d.to, keys, want, decode, deliver)
	for _, w := range reserved[next:] { // none, by Sweep's contract; never strand one
		d.finish(w, result{})
	}
	clear(reserved)
	d.reservedNow = reserved[:0]
	d.stats.ringScans.Add(int64(st.Scans))
	if err != nil {
		// A corrupt ring is dropped by the ring package; its waiters wait
		// on. Nothing to return it to: Recv's own Get would report it.
		d.c.log.Debug("omnishm: receive sweep", "from", from, "err", err)
	}
	return st.Frames, st.Busy
}

// recentLost reports that recent cannot vouch for new waiters' keys.
func (d *dispatcher) recentLost() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.recent == nil
}

// freshTries are the keys of the new waiters, still waiting, whose
// segment may be there: all of them when recent cannot vouch; else, once
// the lock-file events queued now are read (one system call for them
// all), those in recent, and the waited keys those events hinted.
func (d *dispatcher) freshTries(fresh []waitKey) []string {
	d.mu.Lock()
	vouch, pending := d.recent != nil, false
	for _, w := range fresh {
		if _, ok := d.keys[w.key]; ok {
			pending = true
			break
		}
	}
	d.mu.Unlock()
	if !pending {
		return nil
	}
	if vouch {
		// A publication whose close is still queued is in recent, or
		// hinted, once read; one closed after this read finds its key
		// waited.
		d.syncHints()
		if d.shmWatch.Lost() {
			d.nudge() // serve again: rewatch, relist, try every waited key
		}
	}
	tries := d.tryBuf[:0]
	defer func() { d.tryBuf = tries }()
	d.mu.Lock()
	defer d.mu.Unlock()
	if vouch && d.shmWatch.Lost() {
		d.recent = nil
	}
	for _, w := range fresh {
		if _, ok := d.keys[w.key]; !ok {
			continue
		}
		if d.recent == nil {
			tries = append(tries, w.key)
		} else if _, ok := d.recent[w.key]; ok {
			delete(d.recent, w.key)
			tries = append(tries, w.key)
		}
	}
	if vouch {
		tries = append(tries, d.hinted...)
		d.hinted = nil
	}
	return tries
}

// trySegments claims the per-key segments of keys that still have waiters;
// found reports a claim.
func (d *dispatcher) trySegments(keys []string) (found bool) {
	if len(keys) == 0 {
		return false
	}
	if d.seen == nil {
		d.seen = map[string]bool{}
	}
	seen := d.seen
	defer clear(seen)
	for _, key := range keys {
		if seen[key] {
			continue
		}
		seen[key] = true
		d.mu.Lock()
		w := d.reserveLocked("", key)
		if w == nil {
			// Its waiter left before the try (a hinted key's, or a new
			// one's): the next waiter of the key tries it.
			d.rememberLocked(key)
		}
		d.mu.Unlock()
		if w == nil {
			continue
		}
		d.stats.segmentTries.Add(1)
		msg, ok, err := d.c.getSegmentInto(w.from, d.to, key, w.alloc)
		if err != nil {
			err = keyError("recv", key, err)
		}
		found = found || ok
		d.finish(w, result{msg: msg, ok: ok, err: err})
	}
	return found
}

// syncHints reads the lock-file events queued now (hint runs for each) and
// returns how many lock files they name.
func (d *dispatcher) syncHints() uint64 {
	if d.shm == nil {
		return 0
	}
	d.mu.Lock()
	before := d.hints
	d.mu.Unlock()
	for d.shm.Sync() {
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hints - before
}

// rewatchHints replaces a lost hint watch (an overflow dropped events, or
// /dev/shm went away); the caller then tries every waited key.
func (d *dispatcher) rewatchHints() {
	d.shmWatch.Remove()
	x, err := d.shm.AddNamed(scope.ShmDir, unix.IN_CLOSE_WRITE, d.hint)
	if err != nil {
		d.c.watchFailed("per-key hints", err)
		d.shm.Close()
		d.shm, d.shmWatch = nil, nil
		d.mu.Lock()
		d.recent = nil
		d.mu.Unlock()
		return
	}
	d.shmWatch = x
	d.relist()
}

// shutdown ends every waiter with ErrClosed and releases the hint watch.
func (d *dispatcher) shutdown() {
	d.mu.Lock()
	var all []*waiter
	for _, first := range d.keys {
		for w := first; w != nil; w = w.next {
			all = append(all, w)
		}
	}
	clear(d.keys)
	clear(d.edges)
	d.count.Store(0)
	d.fresh, d.hinted = nil, nil
	for _, w := range all {
		w.state.Store(int32(finished))
		w.ch <- result{err: ErrClosed}
	}
	d.mu.Unlock()
	if d.shm != nil {
		d.shm.Close()
	}
}

// settled reports that nothing is left for serve: no new waiter, no hint,
// no wakeup in the FIFO or not yet served, and serve not running. (It
// drains the FIFO: for tests.)
func (d *dispatcher) settled() bool {
	d.mu.Lock()
	pending := len(d.fresh) + len(d.hinted)
	d.mu.Unlock()
	if d.c.waiter != nil && d.c.waiter.Generation() != d.wakes.Load() {
		return false
	}
	return pending == 0 && !d.serving.Load() && len(d.kick) == 0
}

// close stops the dispatcher: no new waiter, the leader leaves, then every
// waiter returns ErrClosed.
func (d *dispatcher) close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	close(d.stop)
	if d.fifo {
		d.c.waiter.Interrupt()
	}
	d.leaders.Wait()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.shutdown()
	return nil
}
