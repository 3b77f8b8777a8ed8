package shmstate

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/internal/shmtest"
	"omnishm/proc"
	"omnishm/scope"
	"omnishm/wake"
)

func TestMain(m *testing.M) { shmtest.Main(m, nil) }

// fixture is a fake shared-memory directory holding one scope's state.
type fixture struct {
	dir, scope       string
	names            scope.Names
	ringDir, wakeDir string
	liveRing         string
	deadRing         string
	now              time.Time
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{dir: t.TempDir(), now: time.Now()}
	f.scope = shmtest.Scope(t)
	f.names = scope.ForUID(os.Getuid(), f.scope, os.Getppid())
	f.ringDir = filepath.Join(f.dir, f.names.RingDirName)
	f.wakeDir = filepath.Join(f.dir, filepath.Base(f.names.WakeDir))
	for _, d := range []string{f.ringDir, f.wakeDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	self, err := proc.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	dead := shmtest.DeadProcess(t)
	f.liveRing = f.names.RingName("0", "1", os.Getpid(), "aa")
	f.deadRing = f.names.RingName("0", "1", dead.PID, "bb")
	shmtest.WriteFile(t, filepath.Join(f.dir, f.liveRing), buildRing(4096, uint64(os.Getpid()), self, []frameSpec{
		{key: "done", payload: 5, state: stateDone},
		{key: "r1", payload: 50},
		{key: "r2", payload: 7, kind: 1},
	}))
	shmtest.WriteFile(t, filepath.Join(f.dir, f.deadRing), buildRing(4096, uint64(dead.PID), dead.Start, []frameSpec{{key: "lost", payload: 3}}))
	for _, m := range []string{f.liveRing, f.deadRing, f.names.EdgePrefix("0", "2") + "77_cc"} {
		shmtest.WriteFile(t, filepath.Join(f.ringDir, m), nil)
	}
	// Per-key files: an orphan lock, a young lock, a segment with its lock.
	shmtest.WriteFileAt(t, filepath.Join(f.dir, scope.LockName("orphan")), nil, f.now.Add(-2*time.Minute))
	shmtest.WriteFile(t, filepath.Join(f.dir, scope.LockName("young")), nil)
	// The young lock file is a put in progress: its producer (this test)
	// has it open.
	young, err := os.Open(filepath.Join(f.dir, scope.LockName("young")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { young.Close() })
	shmtest.WriteFileAt(t, filepath.Join(f.dir, "seg"), []byte("12345"), f.now.Add(-time.Hour))
	shmtest.WriteFileAt(t, filepath.Join(f.dir, scope.LockName("seg")), nil, f.now.Add(-time.Hour))
	shmtest.WriteFileAt(t, filepath.Join(f.dir, "unrelated"), []byte("x"), f.now.Add(-time.Hour))
	// Wakeup FIFOs: one with a reader (held by this test), one without.
	for _, n := range []string{"1_0a", "1_0b"} {
		shmtest.Mkfifo(t, filepath.Join(f.wakeDir, n))
	}
	rd, err := unix.Open(filepath.Join(f.wakeDir, "1_0a"), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(rd) })
	return f
}

func (f *fixture) options() Options { return Options{Dir: f.dir, Now: f.now} }

func TestScan(t *testing.T) {
	f := newFixture(t)
	for _, o := range []Options{f.options(), {Dir: f.dir, Now: f.now, Scopes: []string{}}} {
		st, err := Scan(o)
		if err != nil {
			t.Fatal(err)
		}
		if o.Scopes != nil {
			if len(st.Scopes) != 0 {
				t.Fatalf("empty scope list shows %d scopes", len(st.Scopes))
			}
			continue
		}
		if len(st.Scopes) != 1 {
			t.Fatalf("scopes = %+v", st.Scopes)
		}
		sc := st.Scopes[0]
		if sc.RingDir != f.names.RingDirName || !sc.RingDirExists || sc.WakeDir != f.wakeDir || !sc.WakeDirExists {
			t.Fatalf("scope = %+v", sc)
		}
		if len(sc.Rings) != 2 {
			t.Fatalf("rings = %+v", sc.Rings)
		}
		byName := map[string]Ring{}
		for _, r := range sc.Rings {
			byName[r.Name] = r
		}
		live, dead := byName[f.liveRing], byName[f.deadRing]
		if live.Producer != Alive || live.Busy || live.Ready != 2 || live.Done != 1 || !slices.Equal(live.ReadyKeys, []string{"r1", "r2"}) ||
			live.Capacity != 4096 || live.Used != 32+80+32 || !live.Marker || live.From != "0" || live.To != "1" || live.PID != os.Getpid() || live.Error != "" {
			t.Errorf("live ring = %+v", live)
		}
		if dead.Producer != Dead || dead.Ready != 1 || !dead.Marker {
			t.Errorf("dead ring = %+v", dead)
		}
		if !slices.Equal(sc.MarkersWithoutRing, []string{f.names.EdgePrefix("0", "2") + "77_cc"}) {
			t.Errorf("markers without ring = %v", sc.MarkersWithoutRing)
		}
		if len(sc.FIFOs) != 2 || !sc.FIFOs[0].Reader || sc.FIFOs[1].Reader || sc.FIFOs[0].Stage != "1" {
			t.Errorf("fifos = %+v", sc.FIFOs)
		}
		if len(st.Segments) != 1 || st.Segments[0].Key != "seg" || st.Segments[0].Size != 5 || time.Duration(st.Segments[0].Age) < time.Hour {
			t.Errorf("segments = %+v", st.Segments)
		}
		locks := map[string]Lock{}
		for _, l := range st.Locks {
			locks[l.Key] = l
		}
		if len(locks) != 3 || !locks["orphan"].Orphan || locks["young"].Orphan || locks["seg"].Orphan || !locks["seg"].Segment {
			t.Errorf("locks = %+v", st.Locks)
		}
	}
}

func TestScanBusyRingIsNotWaitedOn(t *testing.T) {
	f := newFixture(t)
	fd, err := unix.Open(filepath.Join(f.dir, f.liveRing), unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, noFrames := range []bool{false, true} {
		st, err := Scan(Options{Dir: f.dir, Scopes: []string{f.scope}, NoFrames: noFrames})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range st.Scopes[0].Rings {
			// Without frames the scan takes no lock: the ring reads as
			// not busy, its header read all the same.
			if r.Name == f.liveRing && (r.Busy == noFrames || r.Producer != Alive || r.Capacity != 4096 || r.Ready != 0) {
				t.Errorf("held ring, NoFrames %v = %+v, want busy %v, alive", noFrames, r, !noFrames)
			}
		}
	}
}

// paths is the paths of rs, sorted.
func paths(rs []Removal) []string {
	out := shmtest.Map(rs, func(r Removal) string { return r.Path })
	slices.Sort(out)
	return out
}

func TestPrune(t *testing.T) {
	f := newFixture(t)
	// A lock file as young whose segment is gone and that no process has
	// open: its owner is provably gone, so it goes at once (SPEC §6's
	// check, lock, re-check; the grace is only for what cannot be told).
	shmtest.WriteFile(t, filepath.Join(f.dir, scope.LockName("abandoned")), nil)
	want := []string{
		filepath.Join(f.dir, f.deadRing),
		filepath.Join(f.dir, scope.LockName("orphan")),
		filepath.Join(f.dir, scope.LockName("abandoned")),
		filepath.Join(f.ringDir, f.deadRing),
		filepath.Join(f.ringDir, f.names.EdgePrefix("0", "2")+"77_cc"),
		filepath.Join(f.wakeDir, "1_0b"),
	}
	slices.Sort(want)
	dry, err := Prune(PruneOptions{Options: f.options(), DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(dry.Removed); !slices.Equal(got, want) {
		t.Fatalf("dry run would remove\n%v\nwant\n%v", got, want)
	}
	for _, p := range want {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("dry run removed %s", p)
		}
	}
	before := dirStamp(t, f.ringDir)
	rep, err := Prune(PruneOptions{Options: f.options()})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(rep.Removed); !slices.Equal(got, want) {
		t.Fatalf("removed\n%v\nwant\n%v", got, want)
	}
	for _, p := range want {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there", p)
		}
	}
	if after := dirStamp(t, f.ringDir); after <= before {
		t.Errorf("ring dir stamp %d did not advance past %d", after, before)
	}
	// The live ring, its marker, the young lock, the segment, the FIFO with a
	// reader and the unrelated file stay.
	for _, p := range []string{filepath.Join(f.dir, f.liveRing), filepath.Join(f.ringDir, f.liveRing), filepath.Join(f.dir, scope.LockName("young")),
		filepath.Join(f.dir, "seg"), filepath.Join(f.wakeDir, "1_0a"), filepath.Join(f.dir, "unrelated")} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	// Segments go only when asked, and only when older than asked.
	rep, err = Prune(PruneOptions{Options: f.options(), SegmentsOlderThan: 2 * time.Hour})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("2h prune removed %v, %v", paths(rep.Removed), err)
	}
	rep, err = Prune(PruneOptions{Options: f.options(), SegmentsOlderThan: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(rep.Removed); !slices.Equal(got, []string{filepath.Join(f.dir, "seg"), filepath.Join(f.dir, scope.LockName("seg"))}) {
		t.Fatalf("segment prune removed %v", got)
	}
	// Once the live producer is gone, the empty directories go too.
	os.Remove(filepath.Join(f.dir, f.liveRing))
	os.Remove(filepath.Join(f.ringDir, f.liveRing))
	unix.Unlink(filepath.Join(f.wakeDir, "1_0a"))
	rep, err = Prune(PruneOptions{Options: f.options()})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(rep.Removed); !slices.Equal(got, []string{f.ringDir, f.wakeDir}) {
		t.Fatalf("final prune removed %v", got)
	}
}

func TestPruneSkipsLockedAndYoung(t *testing.T) {
	f := newFixture(t)
	hold := func(path string) {
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
	}
	hold(filepath.Join(f.dir, f.deadRing))
	hold(filepath.Join(f.dir, scope.LockName("orphan")))
	rep, err := Prune(PruneOptions{Options: f.options(), FIFOGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(f.ringDir, f.names.EdgePrefix("0", "2")+"77_cc")}
	if got := paths(rep.Removed); !slices.Equal(got, want) {
		t.Fatalf("removed %v, want %v", got, want)
	}
	skipped := paths(rep.Skipped)
	for _, p := range []string{filepath.Join(f.dir, f.deadRing), filepath.Join(f.dir, scope.LockName("orphan")), filepath.Join(f.wakeDir, "1_0b")} {
		if !slices.Contains(skipped, p) {
			t.Errorf("%s not reported skipped: %v", p, skipped)
		}
	}
}

func dirStamp(t *testing.T, dir string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return unix.TimespecToNsec(st.Mtim)
}

func TestNameLiveness(t *testing.T) {
	if got := nameLiveness(os.Getpid()); got != Unknown {
		t.Errorf("nameLiveness(self) = %s", got)
	}
	pid := shmtest.DeadProcess(t).PID
	shmtest.Eventually(t, 10*time.Second, "the killed child to be reaped", func() bool { return proc.Gone(pid) })
	if got := nameLiveness(pid); got != Dead {
		t.Errorf("nameLiveness(dead) = %s", got)
	}
}

// A symlink planted at the wake directory's name leads Scan and Prune
// nowhere: the FIFOs it points at are neither shown nor removed.
func TestSymlinkedWakeDirIgnored(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	s := shmtest.Scope(t)
	n := scope.ForUID(os.Getuid(), s, os.Getppid())
	fifo := filepath.Join(elsewhere, "1_0c")
	shmtest.Mkfifo(t, fifo)
	if err := os.Symlink(elsewhere, filepath.Join(dir, filepath.Base(n.WakeDir))); err != nil {
		t.Fatal(err)
	}
	o := Options{Dir: dir, Scopes: []string{s}}
	st, err := Scan(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Scopes) != 1 || st.Scopes[0].WakeDirExists || len(st.Scopes[0].FIFOs) != 0 {
		t.Fatalf("scan through a symlinked wake dir: %+v", st.Scopes)
	}
	rep, err := Prune(PruneOptions{Options: o})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("prune removed %v (%v)", paths(rep.Removed), err)
	}
	if _, err := os.Lstat(fifo); err != nil {
		t.Fatalf("FIFO behind the symlink: %v", err)
	}
}

// Prune leaves symlinks (and what they point at) and, run as root, another
// user's files, however abandoned they look.
func TestPruneLeavesLinksAndStrangers(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	keep := shmtest.Planted(t, dir, now.Add(-time.Hour), []string{scope.LockName("link")}, []string{scope.LockName("foreign")})
	if os.Geteuid() == 0 {
		dead := shmtest.DeadProcess(t)
		n := scope.ForUID(os.Getuid(), "x", 1) // our names, their file
		ring := filepath.Join(dir, n.RingName("0", "1", dead.PID, "dd"))
		shmtest.WriteFile(t, ring, buildRing(4096, uint64(dead.PID), dead.Start, nil))
		shmtest.Foreign(t, ring)
		keep = append(keep, ring)
	}
	rep, err := Prune(PruneOptions{Options: Options{Dir: dir, Now: now}, SegmentsOlderThan: time.Minute})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("prune removed %v (%v)", paths(rep.Removed), err)
	}
	shmtest.AssertPresent(t, keep...)
}

// writeSleepers makes W/.sleepers_{fifo} as a Go receiver does
// (wake.WriteSleepers); with form false, a file of that size without its
// magic.
func writeSleepers(t *testing.T, wakeDir, fifo string, form bool) string {
	path := filepath.Join(wakeDir, scope.SleepersName(fifo))
	if !form {
		return shmtest.WriteFile(t, path, make([]byte, 64))
	}
	if err := wake.WriteSleepers(wakeDir, fifo); err != nil {
		t.Fatal(err)
	}
	return path
}

// A sleepers file goes with its receiver: when its FIFO is gone or goes in
// the same prune, unless its receiver is starting (its temporary FIFO is
// there), some process maps it, it is young, or it is not a sleepers file.
func TestPruneSleepers(t *testing.T) {
	f := newFixture(t)
	for _, fifo := range []string{"1_0a", "1_0b", "1_0c", "1_0d", "1_0e"} {
		writeSleepers(t, f.wakeDir, fifo, true)
	}
	writeSleepers(t, f.wakeDir, "1_0f", false)
	shmtest.WriteFile(t, filepath.Join(f.wakeDir, scope.TempFIFOName("0d")), nil)
	fd, err := unix.Open(filepath.Join(f.wakeDir, scope.SleepersName("1_0e")), unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, 64, unix.PROT_READ, unix.MAP_SHARED)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)

	st, err := Scan(f.options())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Sleepers{}
	for _, s := range st.Scopes[0].Sleepers {
		got[s.FIFO] = s
	}
	if len(got) != 6 || !got["1_0a"].Reader || !got["1_0b"].FIFOExists || got["1_0b"].Reader || got["1_0c"].FIFOExists {
		t.Fatalf("sleepers = %+v", st.Scopes[0].Sleepers)
	}
	if o := st.Orphans(); o.Sleepers != 5 {
		t.Errorf("orphans = %+v, want 5 sleepers", o)
	}

	sleepers := func(fifos ...string) []string {
		var out []string
		for _, fifo := range fifos {
			out = append(out, filepath.Join(f.wakeDir, scope.SleepersName(fifo)))
		}
		return out
	}
	of := func(rs []Removal) []string {
		var out []string
		for _, r := range rs {
			if r.What == "sleepers" {
				out = append(out, r.Path)
			}
		}
		slices.Sort(out)
		return out
	}
	rep, err := Prune(PruneOptions{Options: f.options(), FIFOGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(of(rep.Removed)) != 0 {
		t.Fatalf("removed young sleepers files: %v", of(rep.Removed))
	}
	for _, dry := range []bool{true, false} {
		rep, err = Prune(PruneOptions{Options: f.options(), DryRun: dry})
		if err != nil {
			t.Fatal(err)
		}
		if want := sleepers("1_0b", "1_0c"); !slices.Equal(of(rep.Removed), want) {
			t.Errorf("dry run %v: removed %v, want %v", dry, of(rep.Removed), want)
		}
		if want := sleepers("1_0d", "1_0e", "1_0f"); !slices.Equal(of(rep.Skipped), want) {
			t.Errorf("dry run %v: skipped %v, want %v", dry, rep.Skipped, want)
		}
	}
	shmtest.AssertAbsent(t, sleepers("1_0b", "1_0c")...)
	shmtest.AssertPresent(t, sleepers("1_0a", "1_0d", "1_0e", "1_0f")...)
}

// A receiver killed without its watchdog leaves its FIFO and sleepers file:
// one prune removes both and the wake directory.
func TestPruneDeadReceiverLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	names := scope.ForUID(os.Getuid(), shmtest.Scope(t), 0)
	wakeDir := filepath.Join(dir, filepath.Base(names.WakeDir))
	if err := os.Mkdir(wakeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	shmtest.Mkfifo(t, filepath.Join(wakeDir, "2_0a"))
	writeSleepers(t, wakeDir, "2_0a", true)
	// A receiver killed between mkfifo and rename leaves its temporary
	// FIFO, with no reader, and the sleepers file of the FIFO it would be.
	shmtest.Mkfifo(t, filepath.Join(wakeDir, scope.TempFIFOName("0b")))
	writeSleepers(t, wakeDir, "2_0b", true)
	tmp := filepath.Join(wakeDir, scope.TempFIFOName("0b"))
	// Just made, it could be a starting receiver's: kept even without a
	// FIFO grace, and so is the sleepers file beside it.
	if _, err := Prune(PruneOptions{Options: Options{Dir: dir}}); err != nil {
		t.Fatal(err)
	}
	shmtest.AssertPresent(t, tmp, filepath.Join(wakeDir, scope.SleepersName("2_0b")))
	shmtest.AssertAbsent(t, filepath.Join(wakeDir, "2_0a"))
	// Once older than the temporary FIFO's grace, it and the rest go.
	if _, err := Prune(PruneOptions{Options: Options{Dir: dir, Now: time.Now().Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	shmtest.AssertAbsent(t, wakeDir)
}
