package wake

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// inotifyOf returns n's inotify watcher, or skips where there is none.
func inotifyOf(t testing.TB, n *Notifier) *inotifyWatch {
	w, ok := n.watch.(*inotifyWatch)
	if !ok || w.stat != nil {
		t.Skip("inotify unavailable")
	}
	return w
}

// watchedNotifier is newNotifier(t, dir) with its inotify watcher, or skips
// where there is none.
func watchedNotifier(t testing.TB, dir string) (*Notifier, *inotifyWatch) {
	n := newNotifier(t, dir)
	return n, inotifyOf(t, n)
}

// notifyCost is what the Notifier spent on change detection and scans.
type notifyCost struct{ checks, lookups, scans int }

func costOf(n *Notifier, w *inotifyWatch) notifyCost {
	n.mu.Lock()
	defer n.mu.Unlock()
	return notifyCost{w.checks, w.lookups, n.scans}
}

// notifyFree makes puts notifies of stage 1 and fails t if they cost any
// check, lookup or scan; it returns the cost so far.
func notifyFree(t *testing.T, n *Notifier, w *inotifyWatch, puts int, what string) notifyCost {
	t.Helper()
	before := costOf(n, w)
	for range puts {
		n.Notify("1")
	}
	if got := costOf(n, w); got != before {
		t.Fatalf("%d notifies %s cost %+v, want %+v", puts, what, got, before)
	}
	return before
}

// With a receiver cached and the directory unchanged, Notify makes no system
// call besides the FIFO write: nothing to detect changes, no scan.
func TestNotifyUnchangedNoSyscalls(t *testing.T) {
	dir := wakeDir(t)
	r := openReceiver(t, dir, "1")
	n, w := watchedNotifier(t, dir)
	n.Notify("1") // watches and scans; FIFO writes queue no events
	const puts = 100
	notifyFree(t, n, w, puts, "of an unchanged directory")
	if got := r.Generation(); got != puts+1 {
		t.Fatalf("receiver saw %d wakeups, want %d", got, puts+1)
	}
}

// A stage without a FIFO pays one read per check of the queue (the
// synchronous check that finds a receiver created just before the put), and
// no lookup; a burst of puts checks once per syncEvery.
func TestNotifyEmptyStageChecksBounded(t *testing.T) {
	for _, absent := range []bool{false, true} {
		t.Run(fmt.Sprintf("absent-dir=%v", absent), func(t *testing.T) {
			dir := wakeDir(t)
			if !absent {
				openReceiver(t, dir, "2")
			}
			n, w := watchedNotifier(t, dir)
			n.Notify("1")
			n.rearm = func() {} // time stands still until the test moves it
			elapse := func() { n.due.Store(true) }
			elapse()
			n.Notify("1") // the first after syncEvery checks
			before := notifyFree(t, n, w, 100, "within syncEvery")
			elapse()
			n.Notify("1")
			want := before
			want.checks++
			if got := costOf(n, w); got != want {
				t.Fatalf("a notify syncEvery later cost %+v, want %+v", got, want)
			}
			// What the check finds: a receiver created since.
			r := openReceiver(t, dir, "1")
			elapse()
			n.Notify("1")
			if gen, changed := r.WaitForChange(0, patience); !changed || gen != 1 {
				t.Fatalf("receiver created between checks: %d, %v", gen, changed)
			}
		})
	}
}

// A burst of notifies to a stage without a FIFO starts the check timer
// once: the timer re-arms itself at each tick after a check, so no check
// resets it on the put path (where a Reset woke the runtime's network
// poller, a system call). A tick with no check since the last lets it
// lapse; the next check starts it again.
func TestNotifyBurstStartsTheTimerOnce(t *testing.T) {
	dir := wakeDir(t)
	openReceiver(t, dir, "2")
	n, w := watchedNotifier(t, dir)
	starts := 0
	n.rearm = func() { starts++ } // no real timer: the test ticks
	n.Notify("1")                 // the first checks and starts it
	before := costOf(n, w)
	const ticks = 10
	for range ticks {
		n.tick()
		n.Notify("1")
		n.Notify("1") // within the tick: no check
	}
	want := before
	want.checks += ticks
	if got := costOf(n, w); got != want || starts != 1 {
		t.Fatalf("%d ticks of notifies cost %+v and %d timer starts, want %+v and 1", ticks, got, starts, want)
	}
	n.tick() // due
	n.tick() // no check since: lapses
	n.Notify("1")
	if starts != 2 {
		t.Fatalf("a check after the timer lapsed: %d timer starts, want 2", starts)
	}
}

// A stage without a FIFO is quiet: notifies to it return without the
// Notifier's lock while no check is due and the directory is unchanged. A
// receiver created meanwhile ends that once the reader goroutine took its
// event, and the next notify, with no check due, wakes it.
func TestNotifyQuietStage(t *testing.T) {
	dir := wakeDir(t)
	openReceiver(t, dir, "2")
	n, w := watchedNotifier(t, dir)
	n.rearm = func() {} // no check comes due unless the test says so
	n.Notify("1")
	if !w.fs.Background() {
		t.Skip("no background reader")
	}
	q := n.quiet.Load()
	if q == nil || q.to != "1" || !q.still() {
		t.Fatalf("stage 1 without a FIFO: quiet %+v, want stage 1, still", q)
	}
	notifyFree(t, n, w, 100, "to a quiet stage")
	if n.quiet.Load() != q {
		t.Fatal("a quiet notify took the locked path")
	}
	r := openReceiver(t, dir, "1")
	shmtest.Eventually(t, patience, "the new FIFO's event to end the quiet", func() bool { return !q.still() })
	n.Notify("1")
	if gen, changed := r.WaitForChange(0, patience); !changed || gen != 1 {
		t.Fatalf("receiver created while its stage was quiet: %d, %v", gen, changed)
	}
	if n.quiet.Load() != nil {
		t.Fatal("a stage with a FIFO is still quiet")
	}
}

// Without a wake directory, Notify looks up no path after the first call
// (it reads the parent's queue instead), and still finds the directory and
// FIFO a receiver creates before the next put.
func TestNotifyAbsentDirNoLookups(t *testing.T) {
	dir := wakeDir(t)
	n, w := watchedNotifier(t, dir)
	n.Notify("1")
	if w.state != absent {
		t.Fatalf("state %d, want absent", w.state)
	}
	before := costOf(n, w)
	const puts = 100
	for range puts {
		n.Notify("1")
	}
	got := costOf(n, w)
	if got.lookups != before.lookups || got.scans != before.scans {
		t.Fatalf("%d notifies without a directory cost %+v, after %+v: lookups or scans", puts, got, before)
	}
	if exists(dir) {
		t.Fatal("Notify created the wake directory")
	}
	r := openReceiver(t, dir, "1")
	n.Notify("1")
	if now, changed := r.WaitForChange(0, patience); !changed || now != 1 {
		t.Fatalf("receiver of a new directory: %d, %v", now, changed)
	}
	if w.state != watching || w.pw != nil {
		t.Fatalf("state %d, parent watch %v; want watching, none", w.state, w.pw)
	}
}

// A second receiver of a stage that already has one is found without any
// synchronous check: the reader goroutine reports the change.
func TestReaderFindsReplica(t *testing.T) {
	dir := wakeDir(t)
	openReceiver(t, dir, "1")
	n, w := watchedNotifier(t, dir)
	n.Notify("1")
	before := costOf(n, w)
	replica := openReceiver(t, dir, "1")
	shmtest.Eventually(t, patience, "the replica to be woken", func() bool {
		n.Notify("1")
		return replica.Generation() > 0
	})
	// The replica's mkfifo and rename may reach the reader apart: one scan
	// or two.
	got := costOf(n, w)
	if got.checks != before.checks || got.scans == before.scans {
		t.Fatalf("finding the replica cost %+v after %+v; want no check and a scan", got, before)
	}
}

// changeOnDemand reports a change only to a synchronous check, once armed.
type changeOnDemand struct{ armed bool }

func (c *changeOnDemand) err() error { return nil }

func (c *changeOnDemand) changed(now bool) bool {
	if now && c.armed {
		c.armed = false
		return true
	}
	return false
}
func (*changeOnDemand) close() error { return nil }

// When the last cached FIFO of a stage reports its reader gone, the same
// Notify checks synchronously and wakes the receiver that replaced it.
func TestReplacedReceiverWokenBySamePut(t *testing.T) {
	dir := wakeDir(t)
	old := openReceiver(t, dir, "1")
	n := newNotifier(t, dir)
	n.watch.close()
	c := &changeOnDemand{}
	n.watch = c
	n.Notify("1") // the first notify of a stage always scans
	old.Close()
	r := openReceiver(t, dir, "1")
	c.armed = true
	n.Notify("1")
	if now, changed := r.WaitForChange(0, patience); !changed || now != 1 {
		t.Fatalf("replacement: %d, %v", now, changed)
	}
	if c.armed {
		t.Fatal("no synchronous check after the last reader left")
	}
}

// Close stops the reader goroutine before it returns.
func TestNotifierCloseStopsReader(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := wakeDir(t)
	openReceiver(t, dir, "1")
	var ws []*inotifyWatch
	var ns []*Notifier
	for range 10 {
		n := NewNotifier(dir)
		ws = append(ws, inotifyOf(t, n))
		ns = append(ns, n)
		n.Notify("1")
	}
	// Each reader runs (counting goroutines would also count one that an
	// earlier test left exiting).
	for i, w := range ws {
		if !w.fs.Background() {
			t.Fatalf("notifier %d: no reader", i)
		}
	}
	for i, n := range ns {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		if ws[i].fs.Background() {
			t.Fatalf("notifier %d: reader still running after Close", i)
		}
		n.Close() // idempotent
	}
	shmtest.Eventually(t, patience, "reader goroutines to exit", func() bool {
		return runtime.NumGoroutine() <= base
	})
}

// BenchmarkDetectLatency measures the window of asynchronous detection: from
// a FIFO's creation to the reader goroutine advancing the epoch.
func BenchmarkDetectLatency(b *testing.B) {
	dir := wakeDir(b)
	openReceiver(b, dir, "2")
	n, w := watchedNotifier(b, dir)
	n.Notify("1")
	path := filepath.Join(dir, "1_latency")
	defer os.Remove(path)
	var lat []time.Duration
	for b.Loop() {
		for _, mk := range []func() error{
			func() error { return unix.Mkfifo(path, fifoMode) },
			func() error { return unix.Unlink(path) },
		} {
			e := w.dirWatch.Epoch()
			start := time.Now()
			if err := mk(); err != nil {
				b.Fatal(err)
			}
			for w.dirWatch.Epoch() == e {
				runtime.Gosched()
			}
			lat = append(lat, time.Since(start))
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
}

// BenchmarkNotifyCost is the producer's cost per put for each state of the
// destination: one receiver (in this process, so its FIFO fills and the
// write fails with EAGAIN, which costs as much as a write that lands), a
// wake directory without a FIFO of the stage, and no wake directory (no
// receiver in the scope: a pure producer).
func BenchmarkNotifyCost(b *testing.B) {
	for _, c := range []struct {
		name  string
		setup func(b *testing.B, dir string)
	}{
		{"1-receiver", func(b *testing.B, dir string) { openReceiver(b, dir, "1") }},
		{"0-receivers", func(b *testing.B, dir string) { openReceiver(b, dir, "2") }},
		{"absent-dir", func(*testing.B, string) {}},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := wakeDir(b)
			c.setup(b, dir)
			n := newNotifier(b, dir)
			n.rearm = n.startTimer // as in production: checks at most every syncEvery
			n.Notify("1")
			b.ReportAllocs()
			loopCountingSyscalls(b, func() { n.Notify("1") })
		})
	}
}

// Where the reader cannot run (its instance is not pollable), every Notify
// checks the queue itself, as before the reader existed.
func TestDeadReaderChecksEveryNotify(t *testing.T) {
	dir := wakeDir(t)
	openReceiver(t, dir, "1")
	n := newNotifier(t, dir)
	n.watch.close()
	n.watch = newInotifyWatch(dir, false)
	w := inotifyOf(t, n)
	n.Notify("1")
	before := costOf(n, w)
	const puts = 10
	for range puts {
		n.Notify("1")
	}
	want := before
	want.checks += puts
	if got := costOf(n, w); got != want {
		t.Fatalf("%d notifies without a reader cost %+v, want %+v", puts, got, want)
	}
}

// countSleepers has r's user announce its sleeps, as the connector's
// dispatcher does (CountSleeps), and returns r's count.
func countSleepers(t *testing.T, r *Receiver) *sleepers {
	t.Helper()
	if r.sleep == nil {
		t.Fatal("the receiver made no sleepers file")
	}
	r.CountSleeps()
	if got := r.sleep.count().Load(); got != 0 {
		t.Fatalf("count after CountSleeps = %d, want 0", got)
	}
	return r.sleep
}

// On NotifyRing, a FIFO whose receiver counts no sleeper gets no write; one
// whose receiver counts one does, and so does every FIFO without a usable
// sleepers file (a Python receiver's, or a file that is not one a receiver
// made) and that of a Go receiver whose user never called CountSleeps.
// Notify writes to all.
func TestNotifySkipsAwakeReceivers(t *testing.T) {
	dir := wakeDir(t)
	counted := openReceiver(t, dir, "1")
	s := countSleepers(t, counted)
	python := openReceiver(t, dir, "1") // Python's receivers make no sleepers file
	if err := removeSleepers(filepath.Split(python.path)); err != nil {
		t.Fatal(err)
	}
	planted := openReceiver(t, dir, "1")
	bad := filepath.Join(dir, scope.SleepersName(filepath.Base(planted.path)))
	if err := os.WriteFile(bad, make([]byte, sleepersSize), 0o600); err != nil { // no magic
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(bad) })
	uncounted := openReceiver(t, dir, "1")
	n := newNotifier(t, dir)
	step := func(sleeping uint32, notify func(string), want [4]uint64) {
		t.Helper()
		s.count().Store(sleeping)
		notify("1")
		got := [4]uint64{counted.Generation(), python.Generation(), planted.Generation(), uncounted.Generation()}
		if got != want {
			t.Fatalf("with %d asleep: counted, python, planted, uncounted saw %v wakeups, want %v", sleeping, got, want)
		}
	}
	step(0, n.NotifyRing, [4]uint64{0, 1, 1, 1})
	step(1, n.NotifyRing, [4]uint64{1, 2, 2, 2})
	step(2, n.NotifyRing, [4]uint64{2, 3, 3, 3})
	step(0, n.NotifyRing, [4]uint64{2, 4, 4, 4})
	step(0, n.Notify, [4]uint64{3, 5, 5, 5})
}

// The receiver's side of the protocol (count, check again, sleep, uncount)
// against a producer that publishes and notifies, one message at a time:
// the producer publishes the next only once the receiver took the last, so
// a wakeup lost would leave the receiver asleep, and the test failing at
// its deadline. Random pauses vary how the two interleave.
func TestSleepersLoseNoWakeup(t *testing.T) {
	dir := wakeDir(t)
	r := openReceiver(t, dir, "1")
	s := countSleepers(t, r)
	n := newNotifier(t, dir)
	const messages = 2000
	var published, taken atomic.Uint64 // published: a ring's head, in effect
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range uint64(messages) {
			for taken.Load() < i {
				runtime.Gosched()
			}
			shmtest.Jitter(3)
			published.Store(i + 1)
			n.NotifyRing("1")
		}
	}()
	slept := 0
	for seen := uint64(0); seen < messages; {
		if published.Load() > seen {
			seen++
			taken.Store(seen)
			continue
		}
		s.count().Add(1)
		gen := r.Generation()
		shmtest.Jitter(3)
		if published.Load() > seen { // the check after counting
			s.count().Add(^uint32(0))
			continue
		}
		slept++
		_, woken := r.WaitForChange(gen, patience)
		s.count().Add(^uint32(0))
		if !woken {
			t.Fatalf("message %d: asleep with nothing to wake it (%d published)", seen+1, published.Load())
		}
	}
	<-done
	t.Logf("%d messages, %d sleeps", messages, slept)
}

// RemoveSleepers removes a receiver's sleepers file (or WriteSleepers'), and
// nothing else at the name: a file without the form, a symlink (nor what
// it points at).
func TestRemoveSleepers(t *testing.T) {
	dir := wakeDir(t)
	r := openReceiver(t, dir, "1")
	name := filepath.Base(r.path)
	path := filepath.Join(dir, scope.SleepersName(name)) // the receiver made it
	if err := RemoveSleepers(dir, name); err != nil {
		t.Fatal(err)
	}
	shmtest.AssertAbsent(t, path)
	if err := RemoveSleepers(dir, name); err != nil {
		t.Fatalf("none there: %v", err)
	}
	// WriteSleepers makes what a receiver makes; it refuses an existing one.
	if err := WriteSleepers(dir, name); err != nil || CheckSleepers(dir, name) != nil {
		t.Fatalf("WriteSleepers: %v; CheckSleepers: %v", err, CheckSleepers(dir, name))
	}
	if err := WriteSleepers(dir, name); !errors.Is(err, os.ErrExist) {
		t.Fatalf("WriteSleepers over one: %v", err)
	}
	if err := RemoveSleepers(dir, name); err != nil {
		t.Fatal(err)
	}
	target := shmtest.WriteFile(t, filepath.Join(dir, "target"), append(sleepersMagic[:], make([]byte, sleepersSize-8)...))
	t.Cleanup(func() { os.Remove(target) })
	for _, plant := range []func() error{
		func() error { return os.WriteFile(path, make([]byte, sleepersSize), 0o600) },
		func() error { return os.Symlink(target, path) },
	} {
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		if err := RemoveSleepers(dir, name); !errors.Is(err, ErrNotSleepers) {
			t.Errorf("got %v, want ErrNotSleepers", err)
		}
		shmtest.AssertPresent(t, path, target)
		os.Remove(path)
	}
}

// WatchErr is nil while inotify follows the wake directory, and says why
// once the Notifier follows it by its modification time instead: here a
// file where the directory should be, which the directory watch refuses
// (IN_ONLYDIR), after which puts still find no FIFO and say nothing.
func TestNotifierWatchErr(t *testing.T) {
	for _, tc := range []struct {
		name    string
		make    func(path string) error
		refused error
	}{
		{"directory", func(path string) error { return os.Mkdir(path, 0o700) }, nil},
		{"no directory yet", func(string) error { return nil }, nil},
		{"a file at its name", func(path string) error { return os.WriteFile(path, nil, 0o600) }, unix.ENOTDIR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "wake")
			if err := tc.make(dir); err != nil {
				t.Fatal(err)
			}
			n := newNotifier(t, dir)
			inotifyOf(t, n)
			if err := n.WatchErr(); err != nil {
				t.Fatalf("before a put: %v", err)
			}
			n.Notify("1")
			if err := n.WatchErr(); !errors.Is(err, tc.refused) || (err == nil) != (tc.refused == nil) {
				t.Fatalf("after a put: %v, want %v", err, tc.refused)
			}
			n.Close()
			if err := n.WatchErr(); err != nil {
				t.Fatalf("closed: %v", err)
			}
		})
	}
}
