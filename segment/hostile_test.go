//go:build linux

package segment

import (
	"os"
	"strings"
	"testing"
	"time"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// Files another user or program can plant in a sticky shared directory:
// symlinks, FIFOs, files of another uid. None is followed, blocked on,
// replaced or removed.

// A producer replaces only its own user's file: run as root, unlink would
// remove another user's file that happens to have the key's name.
func TestPutKeepsAnotherUsersFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a file of another uid")
	}
	dir := t.TempDir()
	key := "foreign"
	theirs := shmtest.WriteFile(t, dir+"/"+key, []byte("theirs"))
	shmtest.Foreign(t, theirs)
	p := NewProducer(Options{Dir: dir})
	defer p.Close()
	if _, err := p.Put(key, []byte("ours")); err == nil || !strings.Contains(err.Error(), "uid 12345") {
		t.Fatalf("put over another uid's file: %v", err)
	}
	if got, err := os.ReadFile(theirs); err != nil || string(got) != "theirs" {
		t.Fatalf("their file: %q, %v", got, err)
	}
	if p.Pending(key) {
		t.Fatal("failed put left the key pending")
	}
}

// A FIFO swapped in at a segment's name between Claim's stat and its open
// is an error, not an open that blocks until some writer appears.
func TestReadSegmentFIFO(t *testing.T) {
	path := shmtest.Mkfifo(t, t.TempDir()+"/fifo")
	if data, err := readSegment(path, nil); err == nil || data != nil {
		t.Fatalf("readSegment(FIFO) = %q, %v", data, err)
	}
}

// Sweeps never remove a symlink, or what it points at, nor another user's
// lock file or segment, however old; nor our lock file beside either.
func TestSweepLeavesLinksAndStrangers(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * OrphanGrace)
	keep := shmtest.Planted(t, dir, old,
		[]string{scope.LockName("link"), "linkseg"},
		[]string{scope.LockName("foreign"), "foreignseg"})
	keep = append(keep, shmtest.WriteFileAt(t, dir+"/"+scope.LockName("linkseg"), nil, old))
	if os.Geteuid() == 0 { // foreignseg exists
		keep = append(keep, shmtest.WriteFileAt(t, dir+"/"+scope.LockName("foreignseg"), nil, old))
	}
	rep, err := Sweep(SweepOptions{ListOptions: ListOptions{Dir: dir}, SegmentsOlderThan: time.Second})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("sweep removed %+v (%v)", rep.Removed, err)
	}
	shmtest.AssertPresent(t, keep...)
}
