//go:build linux

package wake

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

const patience = 30 * time.Second

func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{
		"receiver": receiverRole,
		"notify":   notifyRole,
		"pong":     pongRole,
		"sockpong": sockPongRole,
	})
}

// receiverRole (dir, stage) opens a receiver, says "ready GEN", waits up to
// 30 s for a wakeup and says "woke GEN CHANGED", then closes when the parent
// says so (or is gone) and says "closed".
func receiverRole(args []string) int {
	r, err := OpenReceiver(args[0], args[1])
	if err != nil {
		shmtest.Say("error %v", err)
		return 1
	}
	gen := r.Generation()
	shmtest.Say("ready %d", gen)
	now, changed := r.WaitForChange(gen, patience)
	shmtest.Say("woke %d %t", now, changed)
	shmtest.Hear()
	if err := r.Close(); err != nil {
		shmtest.Say("error %v", err)
		return 1
	}
	shmtest.Say("closed")
	return 0
}

// notifyRole (dir, stage) notifies stage once and says "sent".
func notifyRole(args []string) int {
	n := NewNotifier(args[0])
	n.Notify(args[1])
	n.Close()
	shmtest.Say("sent")
	return 0
}

// pongRole (dir) answers every wakeup of stage 1 with a wakeup of stage 2
// until the parent closes its stdin.
func pongRole(args []string) int {
	r, err := OpenReceiver(args[0], "1")
	if err != nil {
		shmtest.Say("error %v", err)
		return 1
	}
	n := NewNotifier(args[0])
	defer n.Close()
	go func() {
		shmtest.Hear()
		r.Close()
	}()
	// Note the generation before saying ready: the parent's first notify
	// may arrive as soon as it hears us, and must count as a change.
	gen := r.Generation()
	shmtest.Say("ready")
	for {
		var err error
		if gen, err = r.Wait(context.Background(), gen); err != nil {
			return 0
		}
		n.Notify("2")
	}
}

// sockPongRole (path) connects to the Unix socket at path and echoes every
// byte back with blocking reads and writes: the latency baseline.
func sockPongRole(args []string) int {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: args[0]})
	}
	if err != nil {
		shmtest.Say("error %v", err)
		return 1
	}
	var b [1]byte
	for {
		if n, err := unix.Read(fd, b[:]); n != 1 || err != nil {
			return 0
		}
		if _, err := unix.Write(fd, b[:]); err != nil {
			return 0
		}
	}
}

func wakeDir(t testing.TB) string { return scope.New(shmtest.Scope(t)).WakeDir }

func openReceiver(t testing.TB, dir, stage string) *Receiver {
	t.Helper()
	r, err := OpenReceiver(dir, stage)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// newNotifier returns a Notifier for which syncEvery has always passed, so
// that every put to a stage without a FIFO checks the queue: tests of what
// a check finds do not depend on how fast they run.
// TestNotifyEmptyStageChecksBounded controls the time itself.
func newNotifier(t testing.TB, dir string) *Notifier {
	n := NewNotifier(dir)
	t.Cleanup(func() { n.Close() })
	n.rearm = func() { n.ticking = false; n.due.Store(true) } // ticked and lapsed
	return n
}

func exists(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil
}

func TestRacy(t *testing.T) {
	now := time.Unix(1000, 0)
	cases := []struct {
		age  time.Duration
		want bool
	}{
		{0, true},
		{racyWindow - 1, true},
		{racyWindow, false},
		{time.Hour, false},
		{-time.Second, true}, // a clock step backwards: do not trust the stamp
	}
	for _, c := range cases {
		if got := racy(now.Add(-c.age).UnixNano(), now); got != c.want {
			t.Errorf("racy(age %v) = %v, want %v", c.age, got, c.want)
		}
	}
}

func TestCrossProcessWake(t *testing.T) {
	t.Run("parent notifies child receiver", func(t *testing.T) {
		dir := wakeDir(t)
		p := shmtest.Start(t, "receiver", dir, "1")
		if got := p.Line(t, patience); got != "ready 0" {
			t.Fatalf("child: %q", got)
		}
		newNotifier(t, dir).Notify("1")
		// The child's own 30 s timeout would print "woke 0 false".
		if got := p.Line(t, patience+10*time.Second); got != "woke 1 true" {
			t.Fatalf("child: %q, want woke 1 true", got)
		}
		p.Send(t, "close")
		if got := p.Line(t, patience); got != "closed" {
			t.Fatalf("child: %q", got)
		}
		p.Exited(t, patience)
		if exists(dir) {
			t.Fatalf("%s left behind", dir)
		}
	})
	t.Run("child notifies parent receiver", func(t *testing.T) {
		dir := wakeDir(t)
		r := openReceiver(t, dir, "3")
		gen := r.Generation()
		p := shmtest.Start(t, "notify", dir, "3")
		if got := p.Line(t, patience); got != "sent" {
			t.Fatalf("child: %q", got)
		}
		now, changed := r.WaitForChange(gen, patience)
		if !changed || now != gen+1 {
			t.Fatalf("WaitForChange = %d, %v; want %d, true", now, changed, gen+1)
		}
		p.Exited(t, patience)
	})
}

func TestNotifyWithoutReceivers(t *testing.T) {
	missing := wakeDir(t)
	n := newNotifier(t, missing)
	n.Notify("1")
	n.Notify("1")
	if exists(missing) {
		t.Fatal("Notify created the wake directory")
	}

	empty := wakeDir(t)
	if err := os.Mkdir(empty, dirMode); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(empty)
	n = newNotifier(t, empty)
	n.Notify("1")
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatalf("Notify created %v", names)
	}
	if got := len(n.stages["1"].fds); got != 0 {
		t.Fatalf("%d cached targets in an empty directory", got)
	}
	n.Close()
	n.Notify("1") // after Close: nothing, no panic
	n.Notify("not-a-stage")
}

// A notify to stage 1 must not reach stage 2. The fence: a notify to stage 2
// afterwards is in stage 2's FIFO behind anything the first notify wrote
// there, and both writes completed before Notify returned; so once stage 2
// has seen a wakeup, a drain shows every byte it was sent.
func TestOtherStageNotWoken(t *testing.T) {
	dir := wakeDir(t)
	one := openReceiver(t, dir, "1")
	two := openReceiver(t, dir, "2")
	twelve := openReceiver(t, dir, "12")
	n := newNotifier(t, dir)
	n.Notify("1")
	n.Notify("2")
	n.Notify("12")
	for _, c := range []struct {
		name string
		r    *Receiver
	}{{"1", one}, {"2", two}, {"12", twelve}} {
		if _, changed := c.r.WaitForChange(0, patience); !changed {
			t.Fatalf("stage %s not woken", c.name)
		}
		if got := c.r.Generation(); got != 1 {
			t.Errorf("stage %s saw %d wakeups, want 1", c.name, got)
		}
	}
}

func TestDisabled(t *testing.T) {
	dir := wakeDir(t)
	r := openReceiver(t, dir, "1")
	t.Setenv(EnvWakeup, "0")
	if Enabled() {
		t.Fatal("Enabled with " + EnvWakeup + "=0")
	}
	if _, err := OpenReceiver(dir, "1"); !errors.Is(err, ErrDisabled) {
		t.Fatalf("OpenReceiver: %v, want ErrDisabled", err)
	}
	disabled := newNotifier(t, dir)
	t.Setenv(EnvWakeup, "1")
	enabled := newNotifier(t, dir)
	disabled.Notify("1")
	enabled.Notify("1") // fence, as in TestOtherStageNotWoken
	if _, changed := r.WaitForChange(0, patience); !changed {
		t.Fatal("fence not delivered")
	}
	if got := r.Generation(); got != 1 {
		t.Fatalf("%d wakeups, want 1 (the disabled notifier wrote)", got)
	}
}

func TestCloseRemovesFIFOAndEmptyDir(t *testing.T) {
	dir := wakeDir(t)
	a := openReceiver(t, dir, "1")
	b := openReceiver(t, dir, "1")
	for _, r := range []*Receiver{a, b} {
		var st unix.Stat_t
		if err := unix.Lstat(r.path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Mode&0o777 != fifoMode {
			t.Fatalf("%s: mode %#o, want fifo %#o", r.path, st.Mode, fifoMode)
		}
		if !strings.HasPrefix(filepath.Base(r.path), "1_") || len(filepath.Base(r.path)) != 34 {
			t.Fatalf("fifo name %q", r.path)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil || st.Mode&0o777 != dirMode {
		t.Fatalf("wake dir: %v, mode %#o", err, st.Mode&0o777)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(a.path) || !exists(b.path) {
		t.Fatal("first Close: wrong fifo removed")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(b.path) || exists(dir) {
		t.Fatal("last Close left the fifo or the directory")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if g := b.Generation(); g != 0 {
		t.Fatalf("Generation after Close = %d", g)
	}
}

// neverChanged pretends the directory never changes, to observe the cache.
type neverChanged struct{}

func (neverChanged) changed(bool) bool { return false }
func (neverChanged) err() error        { return nil }
func (neverChanged) close() error      { return nil }

func TestNotifierCache(t *testing.T) {
	dir := wakeDir(t)
	first := openReceiver(t, dir, "1")
	n := newNotifier(t, dir)
	n.watch.close()
	n.watch = neverChanged{}
	n.Notify("1") // the first notify of a stage always scans
	late := openReceiver(t, dir, "1")
	n.Notify("1")
	if _, changed := first.WaitForChange(1, patience); !changed {
		t.Fatal("cached receiver not woken")
	}
	if got := late.Generation(); got != 0 {
		t.Fatalf("unchanged directory rescanned: late receiver saw %d", got)
	}
	// A reader that is gone makes the write fail with EPIPE: drop its fd.
	first.Close()
	n.Notify("1")
	if got := len(n.stages["1"].fds); got != 0 {
		t.Fatalf("%d fds cached after the reader closed, want 0", got)
	}
}

func TestLateFIFOFound(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string, n *Notifier)
	}{
		{"directory created after the first notify", func(*testing.T, string, *Notifier) {}},
		{"directory present at the first notify", func(t *testing.T, dir string, _ *Notifier) {
			openReceiver(t, dir, "2")
		}},
		{"mtime fallback", func(t *testing.T, dir string, n *Notifier) {
			openReceiver(t, dir, "2")
			n.watch.close()
			n.watch = &statWatch{dir: dir, why: errors.New("the stat fallback, for the test")}
		}},
		{"receiver replaced", func(t *testing.T, dir string, n *Notifier) {
			old := openReceiver(t, dir, "1")
			n.Notify("1")
			old.Close()
		}},
		{"directory removed and re-created", func(t *testing.T, dir string, n *Notifier) {
			openReceiver(t, dir, "1").Close()
			n.Notify("1")
			if exists(dir) {
				t.Fatal("directory not removed")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := wakeDir(t)
			n := newNotifier(t, dir)
			c.setup(t, dir, n)
			n.Notify("1")
			r := openReceiver(t, dir, "1")
			n.Notify("1")
			if now, changed := r.WaitForChange(0, patience); !changed || now != 1 {
				t.Fatalf("late receiver: %d, %v", now, changed)
			}
		})
	}
}

// A FIFO found before its receiver opened it (a Python receiver creates and
// then opens it) is retried without a directory change.
func TestPendingFIFORetried(t *testing.T) {
	dir := wakeDir(t)
	openReceiver(t, dir, "2") // creates the directory
	path := filepath.Join(dir, "1_"+strings.Repeat("ab", 16))
	if err := unix.Mkfifo(path, fifoMode); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	n := newNotifier(t, dir)
	n.Notify("1")
	if got := len(n.stages["1"].pending); got != 1 {
		t.Fatalf("%d pending fifos, want 1", got)
	}
	n.watch.close()
	n.watch = neverChanged{}
	r, err := openFIFO(dir, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n.Notify("1")
	if now, changed := r.WaitForChange(0, patience); !changed || now != 1 {
		t.Fatalf("retried fifo: %d, %v", now, changed)
	}
}

func TestPlantedFilesNotWritten(t *testing.T) {
	dir := wakeDir(t)
	r := openReceiver(t, dir, "1")
	outside := t.TempDir()
	regular := filepath.Join(dir, "1_regular")
	target := filepath.Join(outside, "target")
	otherFIFO := filepath.Join(outside, "fifo")
	for _, err := range []error{
		os.WriteFile(regular, nil, 0o600),
		os.WriteFile(target, nil, 0o600),
		unix.Mkfifo(otherFIFO, fifoMode),
		os.Symlink(target, filepath.Join(dir, "1_link")),
		os.Symlink(otherFIFO, filepath.Join(dir, "1_fifolink")),
		os.Mkdir(filepath.Join(dir, "1_dir"), dirMode),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, name := range []string{"1_regular", "1_link", "1_fifolink", "1_dir"} {
			os.Remove(filepath.Join(dir, name))
		}
	}()
	// Keep a reader on the outside FIFO so a write to it would succeed.
	fd, err := unix.Open(otherFIFO, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	n := newNotifier(t, dir)
	n.Notify("1")
	if _, changed := r.WaitForChange(0, patience); !changed {
		t.Fatal("the real receiver was not woken")
	}
	for _, path := range []string{regular, target} {
		if st, err := os.Stat(path); err != nil || st.Size() != 0 {
			t.Fatalf("%s written to (%v)", path, err)
		}
	}
	var buf [1]byte
	// No writer has it open: an untouched FIFO reads as end of file.
	if k, err := unix.Read(fd, buf[:]); k != 0 || err != nil {
		t.Fatalf("symlinked fifo received %d bytes (%v)", k, err)
	}
	if got := len(n.stages["1"].fds); got != 1 {
		t.Fatalf("%d cached targets, want 1", got)
	}
}

func TestOpenReceiverRejects(t *testing.T) {
	linkDir := wakeDir(t)
	realDir := t.TempDir()
	if err := os.Symlink(realDir, linkDir); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(linkDir)
	openDir := wakeDir(t)
	if err := os.Mkdir(openDir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(openDir, 0o777)
	defer os.Remove(openDir)
	fileDir := wakeDir(t)
	if err := os.WriteFile(fileDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(fileDir)

	cases := []struct {
		name, dir, stage string
		want             error
	}{
		{"symlinked directory", linkDir, "1", ErrUnsafeDir},
		{"world-writable directory", openDir, "1", ErrUnsafeDir},
		{"file at the directory path", fileDir, "1", nil},
		{"empty stage", wakeDir(t), "", ErrStage},
		{"path in stage", wakeDir(t), "../1", ErrStage},
		{"named stage", wakeDir(t), "thinker", ErrStage},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := OpenReceiver(c.dir, c.stage)
			if err == nil {
				r.Close()
				t.Fatal("accepted")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
	if names, _ := os.ReadDir(realDir); len(names) != 0 {
		t.Fatalf("fifo created through the symlink: %v", names)
	}
}

func TestWaitersAndClose(t *testing.T) {
	dir := wakeDir(t)
	r := openReceiver(t, dir, "1")
	n := newNotifier(t, dir)

	const waiters = 8
	var wg sync.WaitGroup
	results := make(chan uint64, waiters)
	for range waiters {
		wg.Go(func() {
			now, changed := r.WaitForChange(0, patience)
			if changed {
				results <- now
			}
		})
	}
	n.Notify("1")
	wg.Wait()
	close(results)
	if len(results) != waiters {
		t.Fatalf("%d of %d waiters woke", len(results), waiters)
	}

	errs := make(chan error, waiters)
	gen := r.Generation()
	for range waiters {
		wg.Go(func() {
			_, err := r.Wait(context.Background(), gen)
			errs <- err
		})
	}
	r.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("waiter after Close: %v", err)
		}
	}
	if _, changed := r.WaitForChange(0, patience); !changed {
		t.Fatal("generation lost at Close")
	}
	if _, changed := r.WaitForChange(gen, patience); changed {
		t.Fatal("closed receiver reports a change")
	}
}

func TestWaitStops(t *testing.T) {
	r := openReceiver(t, wakeDir(t), "1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if now, err := r.Wait(ctx, 0); now != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on cancelled ctx: %d, %v", now, err)
	}
	if now, changed := r.WaitForChange(0, time.Millisecond); changed || now != 0 {
		t.Fatalf("WaitForChange without a wakeup: %d, %v", now, changed)
	}
	if now, changed := r.WaitForChange(0, 0); changed || now != 0 {
		t.Fatalf("WaitForChange(0 timeout): %d, %v", now, changed)
	}
}

// waitingOn reports whether n goroutines are registered as waiters of r.
func waitingOn(r *Receiver, n int) func() bool {
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.waiting == n
	}
}

// One notify releases every concurrent waiter whose generation it passes,
// including waiters that enter while another goroutine drains the FIFO
// (Generation) and so never see the byte in poll; a waiter for a later
// generation stays until that one arrives.
func TestConcurrentWaitersOneNotify(t *testing.T) {
	for round := range 20 {
		dir := wakeDir(t)
		r := openReceiver(t, dir, "1")
		n := newNotifier(t, dir)
		const waiters = 6
		type result struct {
			now uint64
			err error
		}
		now, later := make(chan result, waiters), make(chan result, 1)
		for range waiters {
			go func() {
				g, err := r.Wait(context.Background(), 0)
				now <- result{g, err}
			}()
		}
		go func() {
			g, err := r.Wait(context.Background(), 1)
			later <- result{g, err}
		}()
		if round%2 == 1 {
			// Half the rounds: every waiter is registered before the
			// notify; otherwise some may still be entering.
			shmtest.Eventually(t, patience, "waiters to register", waitingOn(r, waiters+1))
		}
		n.Notify("1")
		if round%4 == 0 {
			r.Generation() // races the waiters for the byte
		}
		for range waiters {
			if got := <-now; got.err != nil || got.now != 1 {
				t.Fatalf("round %d: waiter returned %d, %v; want 1, nil", round, got.now, got.err)
			}
		}
		select {
		case got := <-later:
			t.Fatalf("round %d: waiter for generation 1 returned at %d, %v", round, got.now, got.err)
		default:
		}
		n.Notify("1")
		if got := <-later; got.err != nil || got.now != 2 {
			t.Fatalf("round %d: later waiter returned %d, %v; want 2, nil", round, got.now, got.err)
		}
		if got := r.Generation(); got != 2 {
			t.Fatalf("round %d: generation %d after two notifies, want 2", round, got)
		}
	}
}

// Cancelling the ctx of a waiter returns the ctx's error promptly whether the
// cancel lands before or after the waiter entered poll; the wakeup used to
// interrupt poll is not counted as a notify.
func TestWaitCancelled(t *testing.T) {
	r := openReceiver(t, wakeDir(t), "1")
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			now uint64
			err error
		}
		about := make(chan struct{})
		done := make(chan result, 1)
		go func() {
			close(about)
			g, err := r.Wait(ctx, 0)
			done <- result{g, err}
		}()
		<-about
		cancel()
		select {
		case got := <-done:
			if got.now != 0 || !errors.Is(got.err, context.Canceled) {
				t.Fatalf("Wait = %d, %v; want 0, context.Canceled", got.now, got.err)
			}
		case <-time.After(patience):
			t.Fatal("cancelled Wait did not return")
		}
	}
	// Now surely in poll: a deadline ctx and a cancel after registering.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	done := make(chan error, 1)
	go func() {
		_, err := r.Wait(ctx, 0)
		done <- err
	}()
	shmtest.Eventually(t, patience, "waiter to register", waitingOn(r, 1))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := r.Wait(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline = %v, want context.DeadlineExceeded", err)
	}
	if got := r.Generation(); got != 0 {
		t.Fatalf("generation %d after cancellations only, want 0", got)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting != 0 {
		t.Fatalf("%d waiters left registered", r.waiting)
	}
}

// Close releases blocked waiters with ErrClosed and stops the background
// reader before it returns (waiters hold no descriptor: they park on a
// channel). 200 rounds, with waiters registered or still arriving.
func TestCloseReleasesPollers(t *testing.T) {
	for round := range 200 {
		dir := wakeDir(t)
		r, err := OpenReceiver(dir, "1")
		if err != nil {
			t.Fatal(err)
		}
		waiters := 1 + round%4
		errs := make(chan error, waiters)
		for range waiters {
			go func() {
				_, err := r.Wait(context.Background(), 0)
				errs <- err
			}()
		}
		if round%2 == 0 {
			shmtest.Eventually(t, patience, "waiters to register", waitingOn(r, waiters))
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.readEnd:
		default:
			t.Fatalf("round %d: Close returned with the reader running", round)
		}
		for range waiters {
			if err := <-errs; !errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: waiter got %v, want ErrClosed", round, err)
			}
		}
		if exists(dir) {
			t.Fatalf("round %d: %s left behind", round, dir)
		}
	}
}

// notifyByScan is the baseline: a directory scan per put.
func notifyByScan(dir, to string) {
	names, _ := os.ReadDir(dir)
	for _, e := range names {
		if !scope.IsStageFIFO(e.Name(), to) {
			continue
		}
		fd, err := unix.Open(filepath.Join(dir, e.Name()), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			unix.Write(fd, zeroByte)
		}
		unix.Close(fd)
	}
}

// startPong starts the "pong" child on dir and has it quit when the
// benchmark ends.
func startPong(b *testing.B, dir string) *shmtest.Proc {
	p := shmtest.Start(b, "pong", dir)
	p.Expect(b, patience, "ready")
	b.Cleanup(func() {
		p.Send(b, "quit")
		p.Wait(b, patience)
	})
	return p
}

// loopCountingSyscalls runs op in the benchmark loop and reports the read
// and write system calls per op.
func loopCountingSyscalls(b *testing.B, op func()) {
	r0, w0 := shmtest.Syscalls(b)
	for b.Loop() {
		op()
	}
	r1, w1 := shmtest.Syscalls(b)
	b.ReportMetric(float64(r1-r0)/float64(b.N), "reads/op")
	b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/op")
}

// BenchmarkNotify measures a notify to a stage with one receiver in another
// process, against a directory scan per put.
func BenchmarkNotify(b *testing.B) {
	dir := wakeDir(b)
	startPong(b, dir)
	// The child answers each wakeup on stage 2; nobody listens there.
	for _, c := range []struct {
		name   string
		notify func(string)
	}{
		{"cached", newNotifier(b, dir).Notify},
		{"scan-per-put", func(to string) { notifyByScan(dir, to) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			c.notify("1")
			loopCountingSyscalls(b, func() { c.notify("1") })
		})
	}
}

// BenchmarkWakeLatency measures put->wake across processes as a round trip:
// the parent wakes the child's stage 1, the child wakes the parent's stage 2.
func BenchmarkWakeLatency(b *testing.B) {
	dir := wakeDir(b)
	r := openReceiver(b, dir, "2")
	startPong(b, dir)
	n := newNotifier(b, dir)
	var rtts []time.Duration
	gen := r.Generation()
	for b.Loop() {
		start := time.Now()
		n.Notify("1")
		var changed bool
		if gen, changed = r.WaitForChange(gen, patience); !changed {
			b.Fatal("no answer")
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds()), "rtt-p50-ns")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds()), "rtt-p99-ns")
}

// BenchmarkSocketLatency is BenchmarkWakeLatency's baseline: the same round
// trip over a Unix stream socket, both ends in blocking reads.
func BenchmarkSocketLatency(b *testing.B) {
	path := filepath.Join(b.TempDir(), "sock")
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(lfd)
	if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: path}); err != nil {
		b.Fatal(err)
	}
	if err := unix.Listen(lfd, 1); err != nil {
		b.Fatal(err)
	}
	p := shmtest.Start(b, "sockpong", path)
	fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		unix.Close(fd) // the child's read ends
		p.Wait(b, patience)
	}()
	var rtts []time.Duration
	msg := []byte{0}
	for b.Loop() {
		start := time.Now()
		if _, err := unix.Write(fd, msg); err != nil {
			b.Fatal(err)
		}
		if n, err := unix.Read(fd, msg); n != 1 || err != nil {
			b.Fatalf("no answer: %d, %v", n, err)
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds()), "rtt-p50-ns")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds()), "rtt-p99-ns")
}

// C tells one selecting goroutine of each batch of wakeups, and the
// generation has counted them by then.
func TestCNotifiesWakeups(t *testing.T) {
	dir := wakeDir(t)
	r := openReceiver(t, dir, "1")
	n := newNotifier(t, dir)
	c := r.C()
	for round := uint64(1); round <= 3; round++ {
		n.Notify("1")
		select {
		case <-c:
		case <-time.After(patience):
			t.Fatalf("round %d: no notification", round)
		}
		r.mu.Lock()
		gen := r.gen
		r.mu.Unlock()
		if gen != round {
			t.Fatalf("round %d: generation %d when C fired", round, gen)
		}
	}
	select {
	case <-c:
		t.Fatal("a notification without a wakeup")
	default:
	}
}

// Await returns for a wakeup (counted by then), for an Interrupt made
// before or during it, for a drain by Generation during or before it, and
// for its deadline; once C runs the background reader it refuses.
func TestAwait(t *testing.T) {
	dir := wakeDir(t)
	r := openReceiver(t, dir, "1")
	n := newNotifier(t, dir)
	n.Notify("1")
	if woke, intr, err := r.Await(time.Time{}); !woke || intr || err != nil || r.Seen() != 1 {
		t.Fatalf("Await after a wakeup: %v, %v, %v, generation %d", woke, intr, err, r.Seen())
	}
	r.Interrupt()
	if woke, intr, err := r.Await(time.Time{}); woke || !intr || err != nil {
		t.Fatalf("Await after Interrupt: %v, %v, %v", woke, intr, err)
	}
	type res struct {
		woke, intr bool
		err        error
	}
	for _, tc := range []struct {
		name   string
		during func()
		want   res
	}{
		{"interrupt", r.Interrupt, res{intr: true}},
		{"notify", func() { n.Notify("1") }, res{woke: true}},
		// Generation drains the byte the poller would have reported.
		{"drained", func() { n.Notify("1"); r.Generation() }, res{woke: true}},
	} {
		done := make(chan res, 1)
		go func() {
			woke, intr, err := r.Await(time.Time{})
			done <- res{woke, intr, err}
		}()
		shmtest.Eventually(t, patience, "Await to start", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.awaiting
		})
		tc.during()
		if got := <-done; got != tc.want {
			t.Fatalf("%s: Await returned %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// A drain by Generation between two Awaits: the next Await returns at
	// once (the FIFO it drained no longer wakes the poller), then no more.
	n.Notify("1")
	r.Generation()
	for i, want := range []bool{true, false} {
		if woke, intr, err := r.Await(time.Now()); woke != want || intr || err != nil {
			t.Fatalf("Await %d after a drain before it: %v, %v, %v; want woke %v", i, woke, intr, err, want)
		}
	}
	r.C()
	if _, _, err := r.Await(time.Time{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Await beside C: %v, want ErrClosed", err)
	}
	n.Notify("1")
	select { // the background reader still reads, whatever Interrupt did
	case <-r.C():
	case <-time.After(patience):
		t.Fatal("C silent after Await and Interrupt")
	}
}
