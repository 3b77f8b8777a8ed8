//go:build linux

package watchdog

import (
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/internal/reexec"
	"omnishm/internal/shmtest"
	"omnishm/scope"
	"omnishm/wake"
)

const patience = 10 * time.Second

func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{"owner": ownerRole})
}

// ownerRole makes and tracks files as its arguments OP:PATH say, says
// "ready WATCHDOG_PID", and then obeys one line: "close" (Close, say
// "closed", exit), "exit" (exit without Close); anything else, or the
// parent's end, exits too. OPs:
//
//	track    create PATH, Track it
//	forget   create PATH, Track it, Forget it
//	lock     a put that died after creating the lock file: TrackSegment
//	         PATH, create its lock file
//	empty    ... after creating the segment: also create PATH, empty
//	written  ... while writing: also Track PATH and write to it
//	announce TrackSegment PATH only
//	dir      create the directory PATH, TrackDir it
//	fifo     create the FIFO PATH and its sleepers file, Track the FIFO
func ownerRole(args []string) int {
	w := New()
	for _, arg := range args {
		op, path, _ := strings.Cut(arg, ":")
		if err := own(w, op, path); err != nil {
			shmtest.Say("error %v", err)
			return 1
		}
	}
	shmtest.Say("ready %d", w.pid())
	if shmtest.Hear() == "close" {
		w.Close()
		shmtest.Say("closed")
	}
	return 0
}

// lockOf is the lock file of the segment at path.
func lockOf(path string) string {
	return filepath.Join(filepath.Dir(path), scope.LockName(filepath.Base(path)))
}

func own(w *Watchdog, op, path string) error {
	lock := lockOf(path)
	switch op {
	case "dir":
		if err := os.Mkdir(path, 0o700); err != nil {
			return err
		}
		return w.TrackDir(path)
	case "fifo":
		if err := unix.Mkfifo(path, 0o600); err != nil {
			return err
		}
		if err := writeSleepers(path); err != nil {
			return err
		}
		return w.Track(path)
	case "track", "forget":
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			return err
		}
		if err := w.Track(path); err != nil {
			return err
		}
		if op == "forget" {
			w.Forget(path)
		}
		return nil
	}
	if err := w.TrackSegment(path); err != nil || op == "announce" {
		return err
	}
	if err := os.WriteFile(lock, nil, 0o600); err != nil || op == "lock" {
		return err
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil || op == "empty" {
		return err
	}
	if err := w.Track(path); err != nil {
		return err
	}
	return os.WriteFile(path, []byte("half a payload"), 0o600)
}

// pid returns the watchdog's process id, or 0 (for tests).
func (w *Watchdog) pid() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.child == nil {
		return 0
	}
	return w.child.Pid()
}

func shmPath(name string) string { return "/dev/shm/" + shmtest.Key(name) }

func exists(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil
}

// startOwner runs ownerRole and returns it with its watchdog's pid.
func startOwner(t *testing.T, args ...string) (*shmtest.Proc, int) {
	t.Helper()
	p := shmtest.Start(t, "owner", args...)
	line := p.Line(t, patience)
	pid, err := strconv.Atoi(strings.TrimPrefix(line, "ready "))
	if err != nil || pid <= 0 {
		t.Fatalf("child: %q", line)
	}
	return p, pid
}

func removeAll(paths ...string) {
	for _, p := range paths {
		os.Remove(p)
	}
}

func TestOwnerDeathUnlinksTracked(t *testing.T) {
	cases := []struct {
		name string
		end  func(t *testing.T, p *shmtest.Proc)
	}{
		{"SIGKILL", func(t *testing.T, p *shmtest.Proc) { p.Kill() }},
		{"exit without Close", func(t *testing.T, p *shmtest.Proc) {
			p.Send(t, "exit")
			p.Exited(t, patience)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := shmPath("tracked"), shmPath("tracked")
			forgotten, recreated := shmPath("forgotten"), shmPath("recreated")
			defer removeAll(a, b, forgotten, recreated)
			p, pid := startOwner(t, "track:"+a, "track:"+b, "forget:"+forgotten, "track:"+recreated)
			// Someone else consumes recreated and publishes a new file there.
			os.Remove(recreated)
			if err := os.WriteFile(recreated, []byte("new"), 0o600); err != nil {
				t.Fatal(err)
			}
			c.end(t, p)
			shmtest.Eventually(t, patience, "tracked files unlinked and the watchdog gone", func() bool {
				return !exists(a) && !exists(b) && !shmtest.Running(pid)
			})
			if !exists(forgotten) {
				t.Error("forgotten file unlinked")
			}
			if data, err := os.ReadFile(recreated); err != nil || string(data) != "new" {
				t.Errorf("re-created file unlinked or changed: %q, %v", data, err)
			}
		})
	}
}

// A put killed at any point leaves neither the segment nor its lock file;
// a publication of another process under an announced name stays, and so
// do directories that are not empty.
func TestOwnerDeathRemovesPerKeyFilesAndDirs(t *testing.T) {
	lock, empty, written := shmPath("lock"), shmPath("empty"), shmPath("written")
	theirs, emptyDir, fullDir := shmPath("theirs"), shmPath("emptydir"), shmPath("fulldir")
	ringDir := scope.New(shmtest.Scope(t)).RingDir()
	// The owner's ring and its marker: the marker goes with the ring.
	ringName := filepath.Base(ringDir) + "_0_1_1_ab"
	ringFile, marker := scope.Path(ringName), ringDir+"/"+ringName
	kept := filepath.Join(fullDir, "kept")
	removed := []string{lock, lockOf(lock), empty, lockOf(empty), written, lockOf(written), emptyDir, ringFile, marker, ringDir}
	defer removeAll(append(removed, theirs, lockOf(theirs), kept, fullDir)...)
	p, pid := startOwner(t, "lock:"+lock, "empty:"+empty, "written:"+written, "announce:"+theirs,
		"dir:"+emptyDir, "dir:"+fullDir, "dir:"+ringDir, "track:"+ringFile)
	// Another process publishes under the name announced by the owner, and
	// fills one of its directories; a marker is left without its ring.
	shmtest.WriteFile(t, lockOf(theirs), nil)
	shmtest.WriteFile(t, theirs, []byte("their payload"))
	shmtest.WriteFile(t, kept, nil)
	shmtest.WriteFile(t, marker, nil) // as a producer's, once its ring is ready
	p.Kill()
	shmtest.Eventually(t, patience, "the dead owner's files removed and the watchdog gone", func() bool {
		return !slices.ContainsFunc(removed, exists) && !shmtest.Running(pid)
	})
	shmtest.AssertPresent(t, theirs, lockOf(theirs), kept, fullDir)
}

// writeSleepers makes the sleepers file of the FIFO at path, as its
// receiver does.
func writeSleepers(path string) error {
	return wake.WriteSleepers(filepath.Dir(path), filepath.Base(path))
}

func sleepersOf(fifo string) string {
	return filepath.Join(filepath.Dir(fifo), scope.SleepersName(filepath.Base(fifo)))
}

// A dead receiver's FIFO goes with its sleepers file, and then the empty
// wake directory; another receiver's FIFO and sleepers file stay, and so
// does the sleepers file of a FIFO re-created by someone else since.
func TestOwnerDeathRemovesSleepers(t *testing.T) {
	wakeDir := scope.New(shmtest.Scope(t)).WakeDir
	fifo := func() string {
		id, err := scope.NewID()
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(wakeDir, scope.FIFOName("1", id))
	}
	mine, replaced, theirs := fifo(), fifo(), fifo()
	all := []string{mine, sleepersOf(mine), replaced, sleepersOf(replaced), theirs, sleepersOf(theirs)}
	defer removeAll(append(all, wakeDir)...)
	p, pid := startOwner(t, "dir:"+wakeDir, "fifo:"+mine, "fifo:"+replaced)
	shmtest.Mkfifo(t, theirs)
	if err := writeSleepers(theirs); err != nil {
		t.Fatal(err)
	}
	os.Remove(replaced) // another receiver's FIFO at the name, so not the owner's
	shmtest.Mkfifo(t, replaced)
	p.Kill()
	shmtest.Eventually(t, patience, "the dead receiver's FIFO and sleepers file removed", func() bool {
		return !exists(mine) && !exists(sleepersOf(mine)) && !shmtest.Running(pid)
	})
	shmtest.AssertPresent(t, replaced, sleepersOf(replaced), theirs, sleepersOf(theirs), wakeDir)
	removeAll(append(all, wakeDir)...)

	// Alone, it leaves nothing, not even the wake directory.
	mine = fifo()
	p, pid = startOwner(t, "dir:"+wakeDir, "fifo:"+mine)
	p.Kill()
	shmtest.Eventually(t, patience, "the dead receiver's files and wake directory removed", func() bool {
		return !exists(wakeDir) && !shmtest.Running(pid)
	})
}

func TestCloseForgetsEverything(t *testing.T) {
	a := shmPath("kept")
	defer removeAll(a)
	p, pid := startOwner(t, "track:"+a)
	p.Send(t, "close")
	if got := p.Line(t, patience); got != "closed" {
		t.Fatalf("child: %q", got)
	}
	if shmtest.Running(pid) {
		t.Fatal("watchdog still running after Close returned")
	}
	p.Exited(t, patience)
	if !exists(a) {
		t.Fatal("Close unlinked a tracked file")
	}
}

// The watchdog ignores the signals a Ctrl-C or a group kill sends, and runs
// in a session of its own.
func TestWatchdogSurvivesSignals(t *testing.T) {
	a := shmPath("signalled")
	defer removeAll(a)
	p, pid := startOwner(t, "track:"+a)
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var ignored uint64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			ignored, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	for _, sig := range []unix.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP} {
		if ignored&(1<<(sig-1)) == 0 {
			t.Errorf("watchdog does not ignore %v (SigIgn %#x)", sig, ignored)
		}
	}
	if sid, err := unix.Getsid(pid); err != nil || sid != pid {
		t.Errorf("watchdog session %d (%v), want its own (%d)", sid, err, pid)
	}
	unix.Kill(pid, unix.SIGINT)
	unix.Kill(pid, unix.SIGTERM)
	p.Kill()
	shmtest.Eventually(t, patience, "tracked file unlinked after signals", func() bool {
		return !exists(a) && !shmtest.Running(pid)
	})
}

func TestNoInheritedDescriptors(t *testing.T) {
	a := shmPath("fds")
	secret := filepath.Join(t.TempDir(), "secret")
	f, err := os.Create(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.WriteFile(a, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer removeAll(a)
	w := New()
	defer w.Close()
	if err := w.Track(a); err != nil {
		t.Fatal(err)
	}
	dir := "/proc/" + strconv.Itoa(w.pid()) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		link, _ := os.Readlink(filepath.Join(dir, e.Name()))
		if link == secret || strings.HasPrefix(link, "/dev/shm/") {
			t.Errorf("watchdog holds fd %s -> %s", e.Name(), link)
		}
	}
}

func TestInProcessLifecycle(t *testing.T) {
	a := shmPath("inproc")
	if err := os.WriteFile(a, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer removeAll(a)
	w := New()
	if w.pid() != 0 {
		t.Fatal("watchdog started before the first Track")
	}
	for range 3 {
		if err := w.Track(a); err != nil {
			t.Fatal(err)
		}
	}
	pid := w.pid()
	w.Forget(a)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if shmtest.Running(pid) || !exists(a) {
		t.Fatalf("after Close: watchdog gone %v, file kept %v", !shmtest.Running(pid), exists(a))
	}
	if err := w.Track(a); !errors.Is(err, ErrClosed) {
		t.Fatalf("Track after Close: %v", err)
	}
	w.Forget(a)
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestTrackRejects(t *testing.T) {
	dir := shmPath("dir")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	defer removeAll(dir)
	cases := []struct {
		path string
		want error
	}{
		{"/tmp/x", ErrPath},
		{"/dev/shm", ErrPath},
		{"/dev/shm/", ErrPath},
		{"/dev/shm/../etc/passwd", ErrPath},
		{"/dev/shm/a/../b", ErrPath},
		{"dev/shm/x", ErrPath},
		{"/dev/shm/a\nb", ErrPath},
		{"/dev/shm/a\x00b", ErrPath},
		{"/dev/shm/" + strings.Repeat("a", maxPath), ErrPath},
		{dir, ErrPath},
		{shmPath("missing"), os.ErrNotExist},
	}
	w := New()
	defer w.Close()
	for _, c := range cases {
		if err := w.Track(c.path); !errors.Is(err, c.want) {
			t.Errorf("Track(%q) = %v, want %v", c.path, err, c.want)
		}
	}
	if w.pid() != 0 {
		t.Fatal("a rejected Track started the watchdog")
	}
}

func TestStartFailure(t *testing.T) {
	a := shmPath("nostart")
	if err := os.WriteFile(a, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer removeAll(a)
	for _, exe := range []string{"/nonexistent/omnishm", "/bin/true"} {
		w := &Watchdog{exe: exe}
		for range 2 {
			if err := w.Track(a); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("%s: Track = %v, want ErrUnavailable", exe, err)
			}
		}
		w.Forget(a)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// encode is the line the owner sends for c.
func encode(c command) []byte {
	switch c.op {
	case '+':
		return appendTrack(nil, c.id, c.path)
	case '.':
		return []byte(".\n")
	}
	return appendPath(nil, c.op, c.path)
}

func TestProtocolRoundTrip(t *testing.T) {
	cases := []command{
		{op: '+', id: fileID{dev: 25, ino: 1 << 40}, path: "/dev/shm/key_1"},
		{op: '+', id: fileID{dev: 0, ino: ^uint64(0)}, path: "/dev/shm/omni_shm_ring_v1_0_ab/omni:x"},
		{op: 's', path: "/dev/shm/key_1"},
		{op: 'd', path: "/dev/shm/omni_shm_wake_0_ab"},
		{op: '-', path: "/dev/shm/key 2"},
		{op: '.'},
	}
	for _, c := range cases {
		line := encode(c)
		got, err := parseCommand(strings.TrimSuffix(string(line), "\n"))
		if err != nil || got != c {
			t.Errorf("%q: parsed %+v, %v; want %+v", line, got, err, c)
		}
	}
	for _, bad := range []string{"", "+", "+1:2", "+1:x:/dev/shm/a", "+-1:2:/dev/shm/a", "+1:2:/tmp/a",
		"-/etc/passwd", "-", "*/dev/shm/a", "..", "+1:2:/dev/shm/../x", "s/tmp/a", "s", "d/dev/shm",
		"d/dev/shm/../etc", "S/dev/shm/a"} {
		if c, err := parseCommand(bad); err == nil {
			t.Errorf("parseCommand(%q) = %+v, want error", bad, c)
		}
	}
}

// The command pipe is read lazily only where it could be given pipeBytes
// of room; anything else (here a regular file, whose F_SETPIPE_SZ fails)
// is read as commands come. Either way every command arrives, and the
// owner's end closing ends the reads.
func TestCommandPipe(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "commands")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if r := newLazyPipe(f); r != io.Reader(f) {
		t.Fatalf("a regular file is read through %T, want as it is", r)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	r, lazy := newLazyPipe(pr).(*lazyPipe)
	if !lazy {
		t.Skipf("no %d-byte pipe here (fs.pipe-max-size): the pipe is read as commands come", pipeBytes)
	}
	done := make(chan []string, 1)
	go func() {
		var lines []string
		lr := reexec.NewLineReader(r)
		for {
			line, err := lr.ReadLine()
			if err != nil {
				done <- lines
				return
			}
			lines = append(lines, line)
		}
	}()
	want := []string{"-/dev/shm/a", "-/dev/shm/b", "."}
	for _, l := range want {
		if _, err := io.WriteString(pw, l+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	pw.Close()
	if got := shmtest.Await(t, patience, "the commands", done); !slices.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
}

func TestRegistry(t *testing.T) {
	reg := registry{}
	x, y := fileID{1, 2}, fileID{1, 3}
	for _, c := range []command{
		{op: '+', id: x, path: "/dev/shm/a"},
		{op: '+', id: y, path: "/dev/shm/b"},
		{op: '+', id: y, path: "/dev/shm/c"},
		{op: '-', path: "/dev/shm/b"},
		{op: 's', path: "/dev/shm/seg"}, // announced, not created yet
		{op: 's', path: "/dev/shm/a"},   // a re-put keeps the identity until the new one
		{op: 'd', path: "/dev/shm/dir"},
	} {
		reg.apply(c)
	}
	want := registry{
		"/dev/shm/a":   {id: x, known: true, segment: true},
		"/dev/shm/c":   {id: y, known: true},
		"/dev/shm/seg": {segment: true},
		"/dev/shm/dir": {dir: true},
	}
	if !maps.Equal(reg, want) {
		t.Fatalf("registry %v, want %v", reg, want)
	}
	// a is still x; c was replaced by another file; the others name no
	// file yet, or a directory.
	reg.prune(func(path string) (fileID, bool) {
		if path == "/dev/shm/a" {
			return x, true
		}
		return fileID{9, 9}, true
	})
	delete(want, "/dev/shm/c")
	if !maps.Equal(reg, want) {
		t.Fatalf("after prune %v, want %v", reg, want)
	}
	reg.apply(command{op: '.'})
	if len(reg) != 0 {
		t.Fatalf("after forget-all %v", reg)
	}
}

func FuzzParseCommand(f *testing.F) {
	f.Add("+1:2:/dev/shm/a")
	f.Add("-/dev/shm/a")
	f.Add("s/dev/shm/a")
	f.Add("d/dev/shm/a")
	f.Add(".")
	f.Add("+18446744073709551615:0:/dev/shm/x/y")
	f.Fuzz(func(t *testing.T, line string) {
		c, err := parseCommand(line)
		if err != nil {
			return
		}
		if checkPath(c.path) != nil && c.op != '.' {
			t.Fatalf("accepted path %q", c.path)
		}
		again := encode(c)
		if c2, err := parseCommand(strings.TrimSuffix(string(again), "\n")); err != nil || c2 != c {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", line, c, again, c2, err)
		}
	})
}

// BenchmarkTrack measures the put-path cost of tracking a segment and
// forgetting it, against creating and unlinking that segment.
func BenchmarkTrack(b *testing.B) {
	path := shmPath("bench")
	defer removeAll(path)
	b.Run("create+unlink (baseline)", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
			unix.Unlink(path)
		}
	})
	b.Run("track+forget", func(b *testing.B) {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			b.Fatal(err)
		}
		w := New()
		defer w.Close()
		if err := w.Track(path); err != nil { // starts the watchdog
			b.Fatal(err)
		}
		b.ReportAllocs()
		before := wakes(b, w.pid())
		for b.Loop() {
			w.Track(path)
			w.Forget(path)
		}
		// The watchdog reads its commands every drainEvery, not as each
		// comes: its wakeups per op stay far below the two commands.
		b.ReportMetric(float64(wakes(b, w.pid())-before)/float64(b.N), "watchdog-wakes/op")
	})
}

// wakes is the voluntary context switches of process pid's threads so
// far: each ended a sleep of theirs.
func wakes(tb testing.TB, pid int) int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, t := range tasks {
		status, err := os.ReadFile(dir + t.Name() + "/status")
		if err != nil {
			continue // a thread that exited
		}
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				k, _ := strconv.Atoi(strings.TrimSpace(v))
				n += k
			}
		}
	}
	return n
}
