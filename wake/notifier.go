//go:build linux

package wake

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// Notifier is the producer side of SPEC §8: Notify writes one zero byte to
// every FIFO of a stage. It keeps the FIFOs open between calls and rescans
// the wake directory only after it changed. Where inotify works, a
// goroutine of the Notifier learns of changes off the put path, so a put to
// a stage with receivers costs one write per receiver and nothing else;
// elsewhere each put also stats the directory. Safe for concurrent use;
// Close stops the goroutine.
//
// The window, and how it is closed: a receiver creates its FIFO, notes its
// generation, gets, and sleeps; a put after that get must wake it. The
// FIFO's creation queued its inotify event before the put, but the
// goroutine may not have taken it yet: its scheduling latency, measured by
// BenchmarkDetectLatency at 10 µs median and 50 µs p99, and up to 20 ms on a
// loaded 2-core VM (the netpoller waits for an idle P or sysmon's poll). So
// Notify checks the queue itself, with one non-blocking read, when the
// stage has no open FIFO: a stage without receivers is where a new one
// matters. It does so once per tick of a timer of period syncEvery at
// most, so a burst of puts to a stage nobody receives from costs no system
// call per put (the pair benchmark is one); a put that comes syncEvery or
// more after the last check always makes one. A receiver that appears
// during a burst is thus woken by the first put syncEvery after the last
// check at the latest; if the burst ends first, it sleeps until its poll
// interval. A stage that already has a receiver skips the read, so a
// second receiver (a replica) created within the window may miss one
// wakeup and sleep until its poll interval or the next put; its peers
// were woken. A stage whose last FIFO reports its reader gone (EPIPE) is
// checked at once, too, so a replaced receiver is found by the same put.
//
// Without a wake directory (no receiver in the scope) the Notifier watches
// its parent and reads that queue at those same checks: no path lookup.
type Notifier struct {
	dir     string
	enabled bool

	mu     sync.Mutex
	watch  watcher
	epoch  uint64 // advances whenever the directory may have changed
	stages map[string]*targets
	closed bool
	scans  int // directory scans, for tests

	// due: a stage without a FIFO may check the queue (see checkDue).
	// A check clears it and the timer's next tick sets it again, so a put
	// reads no clock. The timer re-arms itself at each tick that finds
	// due cleared, so a burst of puts resets no timer on the put path: a
	// Reset there woke the runtime's network poller, a system call on the
	// put path and a context switch on another CPU, every syncEvery. A
	// tick that finds due still set (no check since the last) lets the
	// timer lapse, and the next check starts it again (rearm).
	due     atomic.Bool
	timer   *time.Timer
	ticking bool   // the timer will tick; under mu
	rearm   func() // n.startTimer; tests replace it

	// fence is written by every Notify, a full barrier between the put's
	// publication and the reads of receivers' sleepers counts (see
	// sleepers). A word of its own: Notifiers do not share its cache line.
	fence atomic.Uint32

	// quiet is set, under mu, when a notify left a stage with no FIFO,
	// open or pending: the next notify to that stage, while no queue check
	// is due and the directory did not change, has nothing to do, and
	// returns without mu (the pair benchmark's every put).
	quiet atomic.Pointer[quietStage]
}

// quietStage is a stage without FIFOs and a check, safe without
// Notifier.mu, that the watcher would still report no change.
type quietStage struct {
	to    string
	still func() bool
}

// stillWatcher is a watcher that can say, without Notifier.mu, that it
// has not changed since: still returns a check that changed(false) would
// report no change and make no system call, or nil if it cannot tell.
type stillWatcher interface {
	still() func() bool
}

// syncEvery bounds how often Notify reads the inotify queue itself for a
// stage without a FIFO (see Notifier): about the reader goroutine's p99
// latency on a loaded machine, so a missed wakeup costs a receiver that
// much, while a put stream to a stage without receivers makes one read per
// thousand puts or so.
const syncEvery = time.Millisecond

// targets are the open FIFOs of one stage as of a directory epoch.
type targets struct {
	epoch   uint64
	scanned bool
	fds     []int
	counts  []*sleepers // of fds[i]; nil: none, write every time
	// pending are FIFOs that had no reader when found; they are retried
	// until retryUntil (see retryWindow).
	pending    []string
	retryUntil time.Time
}

// watcher tells whether the wake directory may have changed since its last
// call. The first call after a watcher starts watching reports a change.
// now asks for a change that already happened to be seen now, even if it
// costs a system call (see Notifier); without it a recent change may be
// reported a little later.
type watcher interface {
	changed(now bool) bool
	// err says why the directory is followed by its mtime, not inotify;
	// nil while inotify follows it.
	err() error
	close() error
}

// NewNotifier returns a Notifier for the wake directory dir, which need not
// exist yet. When wakeups are disabled (VLLM_OMNI_SHM_WAKEUP=0 at this call)
// its Notify does nothing.
func NewNotifier(dir string) *Notifier {
	n := &Notifier{dir: dir, enabled: Enabled(), stages: map[string]*targets{}}
	n.due.Store(true)
	n.rearm = n.startTimer
	if n.enabled {
		n.watch = newWatcher(dir)
	}
	return n
}

var zeroByte = []byte{0}

// Notify writes one zero byte, without blocking, to every FIFO dir/{to}_* of
// a numeric stage. Errors are ignored: wakeups are hints (SPEC §8). A full
// FIFO already holds a wakeup the receiver has not drained. The caller
// published before it calls Notify.
func (n *Notifier) Notify(to string) { n.notify(to, false) }

// NotifyRing is Notify after a publication that a Go receiver looks for
// by itself, without a system call, once it announced a sleep and before
// it sleeps (a frame in a ring it attached, see Receiver.BeginSleep): it
// skips each FIFO whose receiver counts no sleeper (see sleepers). FIFOs
// without a count, a Python receiver's among them, get their byte as from
// Notify.
func (n *Notifier) NotifyRing(to string) { n.notify(to, true) }

func (n *Notifier) notify(to string, skipAwake bool) {
	if !n.enabled || !scope.IsNumeric(to) {
		return
	}
	// No FIFO to write (so no sleepers count to fence for), no scan, no
	// check due: what the locked path would do is nothing.
	if q := n.quiet.Load(); q != nil && q.to == to && !n.due.Load() && q.still() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.fence.Add(1)
	t := n.stages[to]
	if t == nil {
		t = &targets{}
		n.stages[to] = t
	}
	now := len(t.fds) == 0 && n.checkDue()
	if n.watch.changed(now) {
		n.epoch++
	}
	if !t.scanned || t.epoch != n.epoch {
		n.scan(to, t)
	} else if len(t.pending) > 0 {
		t.retry()
	}
	if t.write(skipAwake) && len(t.fds) == 0 && !now && n.watch.changed(true) {
		// The last receiver left; a replacement that came before this put
		// must not miss it.
		n.epoch++
		n.scan(to, t)
		t.write(skipAwake)
	}
	n.noteQuiet(to, t)
}

// noteQuiet publishes whether stage to, whose targets are t, is quiet (see
// Notifier.quiet). n.mu is held.
func (n *Notifier) noteQuiet(to string, t *targets) {
	var q *quietStage
	if w, ok := n.watch.(stillWatcher); ok && len(t.fds) == 0 && len(t.pending) == 0 && t.scanned && t.epoch == n.epoch {
		if still := w.still(); still != nil {
			q = &quietStage{to: to, still: still}
		}
	}
	n.quiet.Store(q)
}

// checkDue reports whether a stage without a FIFO should check the queue
// now: the timer ticked since the last check, so none was made in the last
// syncEvery (two may be closer: a check just before a tick, and one just
// after). It starts the timer if it lapsed. n.mu is held.
func (n *Notifier) checkDue() bool {
	if !n.due.Load() {
		return false
	}
	n.due.Store(false)
	if !n.ticking {
		n.ticking = true
		n.rearm()
	}
	return true
}

// startTimer has the timer tick syncEvery from now. n.mu is held.
func (n *Notifier) startTimer() {
	if n.timer == nil {
		n.timer = time.AfterFunc(syncEvery, n.tick)
		return
	}
	n.timer.Reset(syncEvery)
}

// tick is the timer's: it sets due again and ticks on syncEvery later, off
// the put path, while checks clear due; a tick that finds due still set
// lets the timer lapse. A burst of puts thus costs one timer callback per
// syncEvery, and a Notifier that stopped notifying two more at most.
func (n *Notifier) tick() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.due.Swap(true) {
		n.ticking = false
		return
	}
	if n.timer != nil { // nil when a test ticks by hand
		n.timer.Reset(syncEvery)
	}
}

// write writes a wakeup to every FIFO of t (with skipAwake, to those whose
// receiver may sleep), and reports whether it dropped one whose reader is
// gone. n.fence was written since the put's publication.
func (t *targets) write(skipAwake bool) (dropped bool) {
	kept := 0
	for i, fd := range t.fds {
		if c := t.counts[i]; skipAwake && c != nil && c.awake() {
			// It will find the publication without a wakeup.
		} else if _, err := unix.Write(fd, zeroByte); err == unix.EPIPE {
			// The reader is gone; its FIFO will be unlinked or is stale.
			unix.Close(fd)
			c.close()
			dropped = true
			continue
		}
		t.fds[kept], t.counts[kept] = fd, t.counts[i]
		kept++
	}
	clear(t.counts[kept:])
	t.fds, t.counts = t.fds[:kept], t.counts[:kept]
	return dropped
}

// add keeps the FIFO open at fd, and its receiver's sleepers count if it
// has one.
func (t *targets) add(fd int, c *sleepers) {
	t.fds = append(t.fds, fd)
	t.counts = append(t.counts, c)
}

// scan replaces t's FIFOs with those now in the directory.
func (n *Notifier) scan(stage string, t *targets) {
	t.closeAll()
	t.epoch, t.scanned = n.epoch, true
	n.scans++
	dfd, err := unix.Open(n.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(dfd), n.dir)
	defer d.Close()
	var st unix.Stat_t
	// Only a private directory of ours: anything else could hold files
	// planted by another user.
	if unix.Fstat(dfd, &st) != nil || checkPrivateDir(n.dir, &st) != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		if !scope.IsStageFIFO(name, stage) {
			continue
		}
		fd, err := openTarget(dfd, name)
		switch {
		case err == nil:
			t.add(fd, openSleepers(dfd, scope.SleepersName(name)))
		case err == unix.ENXIO:
			t.pending = append(t.pending, filepath.Join(n.dir, name))
		}
	}
	if len(t.pending) > 0 {
		t.retryUntil = time.Now().Add(retryWindow)
	}
}

// openTarget opens dir/name for a non-blocking write if it is a FIFO with a
// reader; ENXIO means it has none.
func openTarget(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		unix.Close(fd)
		return -1, unix.EINVAL
	}
	return fd, nil
}

// retry reopens the pending FIFOs that have a reader by now.
func (t *targets) retry() {
	if time.Now().After(t.retryUntil) {
		t.pending = nil
		return
	}
	left := t.pending[:0]
	for _, path := range t.pending {
		fd, err := openTarget(unix.AT_FDCWD, path)
		switch {
		case err == nil:
			// The sleepers file, if any, was made before the FIFO.
			t.add(fd, openSleepers(unix.AT_FDCWD, filepath.Join(filepath.Dir(path), scope.SleepersName(filepath.Base(path)))))
		case err == unix.ENXIO:
			left = append(left, path)
		}
	}
	t.pending = left
}

func (t *targets) closeAll() {
	for i, fd := range t.fds {
		unix.Close(fd)
		t.counts[i].close()
	}
	clear(t.counts)
	t.fds, t.counts, t.pending = t.fds[:0], t.counts[:0], nil
}

// WatchErr says why the wake directory is followed by its modification
// time, a stat when a put may have to look, instead of inotify (SPEC §8's
// FIFOs are found either way): nil while inotify follows it, or when
// wakeups are disabled. A connector may report it.
func (n *Notifier) WatchErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.watch == nil || n.closed {
		return nil
	}
	return n.watch.err()
}

// Close releases the Notifier's descriptors and stops its goroutine; later
// Notify calls do nothing. It returns what closing the watcher met, and is
// idempotent.
func (n *Notifier) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if n.timer != nil {
		n.timer.Stop()
	}
	for _, t := range n.stages {
		t.closeAll()
	}
	n.stages = nil
	if n.watch != nil {
		return n.watch.close()
	}
	return nil
}

// statWatch detects changes by the directory's identity and mtime: the
// fallback where inotify is unavailable.
type statWatch struct {
	dir     string
	why     error // what inotify refused: why it stands in for inotify
	last    dirStamp
	recheck bool // the last stamp was racy: rescan even if it is unchanged
}

func (w *statWatch) changed(bool) bool {
	var st unix.Stat_t
	if err := unix.Stat(w.dir, &st); err != nil {
		w.last = dirStamp{}
		return true
	}
	s := dirStamp{dev: uint64(st.Dev), ino: uint64(st.Ino), mtime: st.Mtim.Nano()}
	c := s != w.last || w.recheck
	w.last, w.recheck = s, racy(s.mtime, time.Now())
	return c
}

func (w *statWatch) close() error { return nil }

func (w *statWatch) err() error { return w.why }
