package fswatch

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"omnishm/internal/shmtest"
)

// event encodes one inotify event as the kernel does, the name NUL-padded.
func rawEvent(wd int32, mask uint32, name string) []byte {
	size := 0
	if name != "" {
		size = (len(name) + 1 + 15) &^ 15
	}
	b := make([]byte, unix.SizeofInotifyEvent+size)
	binary.NativeEndian.PutUint32(b[0:4], uint32(wd))
	binary.NativeEndian.PutUint32(b[4:8], mask)
	binary.NativeEndian.PutUint32(b[12:16], uint32(size))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

func TestEvents(t *testing.T) {
	two := slices.Concat(rawEvent(1, unix.IN_CREATE, "1_ab"), rawEvent(2, unix.IN_DELETE, ""))
	cases := []struct {
		name string
		buf  []byte
		want []string
	}{
		{"two", two, []string{"1 100 1_ab", "2 200 "}},
		{"truncated header", two[:10], nil},
		{"name cut short", two[:20], nil},
		{"second truncated", two[:len(two)-4], []string{"1 100 1_ab"}},
		{"empty", nil, nil},
	}
	for _, c := range cases {
		var got []string
		for ev := range events(c.buf) {
			got = append(got, string(rune('0'+ev.wd))+" "+maskName(ev.mask)+" "+string(ev.name))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: events %q, want %q", c.name, got, c.want)
		}
	}
}

func maskName(m uint32) string {
	switch m {
	case unix.IN_CREATE:
		return "100"
	case unix.IN_DELETE:
		return "200"
	}
	return "?"
}

// fakeWatches is a passive Watcher with watches whose descriptors the test
// chooses: 1 follows a directory, 3 the entry "base" of its parent.
func fakeWatches(t *testing.T) (w *Watcher, dir, entry *Watch) {
	w, err := New(false)
	if err != nil {
		t.Skip("inotify unavailable:", err)
	}
	t.Cleanup(func() { w.Close() })
	dir, entry = &Watch{w: w, wd: 1}, &Watch{w: w, wd: 3, entry: "base"}
	w.watches[1], w.watches[3] = dir, entry
	return w, dir, entry
}

func TestApply(t *testing.T) {
	cases := []struct {
		name                     string
		buf                      []byte
		dirChanged, dirLost      bool
		entryChanged, entryLost  bool
		overflows                uint64
		dirWatched, entryWatched bool
	}{
		{"create", rawEvent(1, unix.IN_CREATE, "1_ab"), true, false, false, false, 0, true, true},
		{"create then delete self", slices.Concat(rawEvent(1, unix.IN_CREATE, "1_ab"), rawEvent(1, unix.IN_DELETE_SELF, "")), true, true, false, false, 0, true, true},
		{"ignored", rawEvent(1, unix.IN_IGNORED, ""), true, true, false, false, 0, false, true},
		{"overflow", rawEvent(-1, unix.IN_Q_OVERFLOW, ""), true, true, true, true, 1, true, true},
		{"stale watch", slices.Concat(rawEvent(2, unix.IN_CREATE, "base"), rawEvent(2, unix.IN_IGNORED, "")), false, false, false, false, 0, true, true},
		{"stale then current", slices.Concat(rawEvent(2, unix.IN_IGNORED, ""), rawEvent(1, unix.IN_DELETE, "1_ab")), true, false, false, false, 0, true, true},
		{"truncated", rawEvent(1, unix.IN_CREATE, "1_ab")[:10], false, false, false, false, 0, true, true},
		{"entry created", rawEvent(3, unix.IN_CREATE|unix.IN_ISDIR, "base"), false, false, true, false, 0, true, true},
		{"entry moved in", rawEvent(3, unix.IN_MOVED_TO|unix.IN_ISDIR, "base"), false, false, true, false, 0, true, true},
		{"other entries", slices.Concat(rawEvent(3, unix.IN_CREATE, "basex"), rawEvent(3, unix.IN_CREATE, "bas"), rawEvent(3, unix.IN_CREATE, "psm_1")), false, false, false, false, 0, true, true},
		{"other then ours", slices.Concat(rawEvent(3, unix.IN_CREATE, "psm_1"), rawEvent(3, unix.IN_CREATE, "base")), false, false, true, false, 0, true, true},
		{"entry watch gone", rawEvent(3, unix.IN_IGNORED, ""), false, false, true, true, 0, true, false},
		{"empty", nil, false, false, false, false, 0, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, dir, entry := fakeWatches(t)
			d0, e0 := dir.Epoch(), entry.Epoch()
			w.apply(c.buf)
			if got := dir.Epoch() != d0; got != c.dirChanged || dir.Lost() != c.dirLost {
				t.Errorf("directory watch: changed %v lost %v, want %v %v", got, dir.Lost(), c.dirChanged, c.dirLost)
			}
			if got := entry.Epoch() != e0; got != c.entryChanged || entry.Lost() != c.entryLost {
				t.Errorf("entry watch: changed %v lost %v, want %v %v", got, entry.Lost(), c.entryChanged, c.entryLost)
			}
			if w.Overflows() != c.overflows {
				t.Errorf("overflows %d, want %d", w.Overflows(), c.overflows)
			}
			if (w.watches[1] != nil) != c.dirWatched || (w.watches[3] != nil) != c.entryWatched {
				t.Errorf("watches left %v, want directory %v entry %v", w.watches, c.dirWatched, c.entryWatched)
			}
			changed := c.dirChanged || c.entryChanged
			select {
			case <-w.C():
				if !changed {
					t.Error("notified without a change")
				}
			default:
				if changed {
					t.Error("no notification for a change")
				}
			}
		})
	}
}

func newWatcher(t *testing.T, background bool) *Watcher {
	t.Helper()
	w, err := New(background)
	if err != nil {
		t.Skip("inotify unavailable:", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func add(t *testing.T, w *Watcher, path string) *Watch {
	t.Helper()
	x, err := w.Add(path, unix.IN_CREATE|unix.IN_DELETE|unix.IN_ONLYDIR)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// The background reader moves the epoch and notifies C on its own.
func TestBackgroundReaderSeesChange(t *testing.T) {
	w := newWatcher(t, true)
	dir := t.TempDir()
	x := add(t, w, dir)
	e := x.Epoch()
	shmtest.WriteFile(t, filepath.Join(dir, "f"), nil)
	shmtest.Await(t, shmtest.Patience, "a notification", w.C())
	shmtest.Eventually(t, shmtest.Patience, "the epoch to move", func() bool { return x.Epoch() != e })
	if !w.Background() || w.Err() != nil || x.Lost() {
		t.Fatalf("background %v err %v lost %v", w.Background(), w.Err(), x.Lost())
	}
}

// A passive Watcher's epochs move only in Sync, and at once there.
func TestSyncAppliesQueuedEvents(t *testing.T) {
	for _, background := range []bool{false, true} {
		w := newWatcher(t, background)
		dir := t.TempDir()
		x := add(t, w, dir)
		e := x.Epoch()
		shmtest.WriteFile(t, filepath.Join(dir, "f"), nil)
		if !background && x.Epoch() != e {
			t.Fatal("a passive watcher moved without Sync")
		}
		w.Sync()
		if x.Epoch() == e {
			t.Fatalf("background=%v: Sync did not apply a queued event", background)
		}
		if more := w.Sync(); more {
			t.Fatal("an empty queue reported more")
		}
	}
}

// An entry watch counts only events naming its entry.
func TestAddEntryIgnoresOtherNames(t *testing.T) {
	w := newWatcher(t, false)
	parent := t.TempDir()
	x, err := w.AddEntry(parent, "target", unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR)
	if err != nil {
		t.Fatal(err)
	}
	e := x.Epoch()
	if err := os.Mkdir(filepath.Join(parent, "other"), 0o700); err != nil {
		t.Fatal(err)
	}
	w.Sync()
	if x.Epoch() != e {
		t.Fatal("another entry moved the epoch")
	}
	if err := os.Mkdir(filepath.Join(parent, "target"), 0o700); err != nil {
		t.Fatal(err)
	}
	w.Sync()
	if x.Epoch() == e || x.Lost() {
		t.Fatalf("entry created: epoch moved %v, lost %v", x.Epoch() != e, x.Lost())
	}
}

// Removing the watched directory loses the watch; a new watch of a new
// directory never repeats an epoch.
func TestWatchLostAndReplaced(t *testing.T) {
	w := newWatcher(t, false)
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	x := add(t, w, dir)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	w.Sync()
	if !x.Lost() {
		t.Fatal("watch of a removed directory not lost")
	}
	if err := x.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add(dir, unix.IN_CREATE); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("watch of a missing directory: %v, want ENOENT", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	y := add(t, w, dir)
	if y.Epoch() <= x.Epoch() || y.Lost() {
		t.Fatalf("new watch epoch %d after %d, lost %v", y.Epoch(), x.Epoch(), y.Lost())
	}
}

// Close waits for the background reader, loses every watch and is
// idempotent; a closed Watcher reads nothing.
func TestCloseStopsReader(t *testing.T) {
	w, err := New(true)
	if err != nil {
		t.Skip("inotify unavailable:", err)
	}
	x := add(t, w, t.TempDir())
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
	default:
		t.Fatal("reader still running after Close")
	}
	if w.Background() || !errors.Is(w.Err(), os.ErrClosed) || !x.Lost() || w.Sync() {
		t.Fatalf("after Close: background %v err %v lost %v", w.Background(), w.Err(), x.Lost())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.Remove(); err != nil {
		t.Fatal(err)
	}
}

// A named watch hands its owner the name of each event of its mask, before
// the epoch moves; events outside the mask and the watch's own loss name
// nothing.
func TestAddNamedSeesNames(t *testing.T) {
	w := newWatcher(t, false)
	dir := t.TempDir()
	var names []string
	x, err := w.AddNamed(dir, unix.IN_CLOSE_WRITE, func(name []byte) { names = append(names, string(name)) })
	if err != nil {
		t.Fatal(err)
	}
	e := x.Epoch()
	for _, n := range []string{"a", "b_lockfile.lock"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "not-a-close"), 0o700); err != nil {
		t.Fatal(err)
	}
	for w.Sync() {
	}
	if !slices.Equal(names, []string{"a", "b_lockfile.lock"}) || x.Epoch() == e || x.Lost() {
		t.Fatalf("names %q, epoch moved %v, lost %v", names, x.Epoch() != e, x.Lost())
	}
	names = nil
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	w.Sync()
	if len(names) != 0 || !x.Lost() {
		t.Fatalf("after the directory went: names %q, lost %v", names, x.Lost())
	}
}

// An overflow names nothing: the named watch is lost, so its owner rescans.
func TestAddNamedOverflow(t *testing.T) {
	w, _, _ := fakeWatches(t)
	var names []string
	x := &Watch{w: w, wd: 5, seen: func(name []byte) { names = append(names, string(name)) }}
	w.watches[5] = x
	w.apply(slices.Concat(rawEvent(5, unix.IN_CLOSE_WRITE, "k"), rawEvent(-1, unix.IN_Q_OVERFLOW, ""), rawEvent(5, unix.IN_CLOSE_WRITE, "")))
	if !slices.Equal(names, []string{"k"}) || !x.Lost() || w.Overflows() != 1 {
		t.Fatalf("names %q lost %v overflows %d", names, x.Lost(), w.Overflows())
	}
}
