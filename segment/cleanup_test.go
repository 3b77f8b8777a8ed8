//go:build linux

package segment

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// Retiring unclaimed publications: Cleanup, CleanupPrefix, Close, and the
// pending set behind them.

func TestCleanupAndPrefix(t *testing.T) {
	p := newProducer(t)
	base := shmtest.Key("cancel")
	for _, k := range []string{"req_0_0", "req_0_1", "req_0_10other", "request_0_0"} {
		mustPut(t, p, base+k, []byte(k))
	}
	if n, err := p.CleanupPrefix(base + "req_0_"); n != 2 || err != nil {
		t.Fatalf("CleanupPrefix retired %d (%v), want 2", n, err)
	}
	for _, k := range []string{"req_0_0", "req_0_1"} {
		keyGone(t, DefaultDir, base+k)
		if p.Pending(base + k) {
			t.Errorf("%s still pending", k)
		}
	}
	for _, k := range []string{"req_0_10other", "request_0_0"} {
		if !p.Pending(base + k) {
			t.Errorf("%s no longer pending", k)
		}
		if got := mustClaim(t, "", base+k); string(got) != k {
			t.Errorf("%s: claimed %q", k, got)
		}
	}

	key := shmtest.Key("cleanup")
	retired := func() bool {
		t.Helper()
		ok, err := p.Cleanup(key)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	mustPut(t, p, key, []byte("x"))
	if !retired() {
		t.Fatal("cleanup of a pending key reported nothing retired")
	}
	keyGone(t, DefaultDir, key)
	if retired() {
		t.Fatal("second cleanup reported a retirement")
	}
	// A consumed key: nothing left to retire.
	mustPut(t, p, key, []byte("y"))
	mustClaim(t, "", key)
	if retired() {
		t.Fatal("cleanup of a consumed key reported a retirement")
	}
	keyGone(t, DefaultDir, key)
	// Another producer's publication is not ours to retire.
	other := newProducer(t)
	mustPut(t, other, key, []byte("z"))
	if n, err := p.CleanupPrefix(key[:len(key)-1]); retired() || n != 0 || err != nil {
		t.Fatalf("retired a key this producer did not publish (%d, %v)", n, err)
	}
	shmtest.AssertPresent(t, DefaultDir+"/"+key)
}

func TestPendingRotation(t *testing.T) {
	var s pendingSet
	if s.len() != 0 || s.keys(nil) != nil || len(s.rotate(3, nil)) != 0 {
		t.Fatal("zero set not empty")
	}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		s.add(k, fileID{ino: uint64(k[0])})
	}
	s.add("a", fileID{ino: 1}) // present: keeps its place, takes the new identity
	consumed := map[string]bool{"b": true, "e": true}
	keep := func(k string, id fileID) bool {
		if k == "a" && id.ino != 1 {
			t.Errorf("a kept identity %v", id)
		}
		return !consumed[k]
	}
	if got := s.rotate(3, keep); fmt.Sprint(got) != "[b]" {
		t.Fatalf("first batch dropped %v", got)
	}
	// a and c went to the back: d and e come first now.
	if got := s.keys(nil); fmt.Sprint(got) != "[d e a c]" {
		t.Fatalf("order %v", got)
	}
	if got := s.rotate(10, keep); fmt.Sprint(got) != "[e]" || s.len() != 3 {
		t.Fatalf("second batch dropped %v, %d left", got, s.len())
	}
	if id, ok := s.lookup("a"); !ok || id.ino != 1 {
		t.Fatalf("lookup a: %v %v", id, ok)
	}
	if _, ok := s.remove("a"); !ok {
		t.Fatal("remove")
	}
	if _, ok := s.remove("a"); ok {
		t.Fatal("remove")
	}
	if _, ok := s.lookup("a"); ok {
		t.Fatal("lookup after remove")
	}
}

func TestCloseRetiresEverythingOnce(t *testing.T) {
	var removed []string
	var mu sync.Mutex
	p := NewProducer(Options{OnRemove: func(s string) { mu.Lock(); removed = append(removed, s); mu.Unlock() }})
	keys := []string{shmtest.Key("close"), shmtest.Key("close"), shmtest.Key("close")}
	for _, k := range keys {
		mustPut(t, p, k, []byte(k))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		keyGone(t, DefaultDir, k)
		if p.Pending(k) {
			t.Errorf("%s pending after close", k)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if len(removed) != 3 {
		t.Fatalf("OnRemove saw %v", removed)
	}
	k := shmtest.Key("close")
	if _, err := p.Put(k, []byte{1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	keyGone(t, DefaultDir, k)
}

// Close goes on past a key it cannot retire and returns every failure.
func TestCloseReturnsWhatItMeets(t *testing.T) {
	dir := t.TempDir()
	p := NewProducer(Options{Dir: dir})
	for _, k := range []string{"a", "b"} {
		mustPut(t, p, k, []byte(k))
		// Retiring opens the lock file: make that fail.
		lock := dir + "/" + scope.LockName(k)
		if err := os.Remove(lock); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(lock, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	err := p.Close()
	if !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("Close = %v, want EISDIR errors", err)
	}
	for _, k := range []string{"a", "b"} {
		if !strings.Contains(err.Error(), "segment: close: open "+dir+"/"+scope.LockName(k)+":") {
			t.Errorf("Close's error does not name %s's lock file: %v", k, err)
		}
	}
}

// A producer's files are closed: no descriptor outlives Put, Claim,
// Cleanup, Close or a sweep.
func TestNoDescriptorLeak(t *testing.T) {
	dir := t.TempDir()
	count := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(entries)
	}
	round := func() {
		p := NewProducer(Options{Dir: dir})
		for i := range 10 {
			key := fmt.Sprintf("leak_%d", i)
			mustPut(t, p, key, []byte("x"))
			if i%2 == 0 {
				mustClaim(t, dir, key)
			}
		}
		Claim(dir, "leak_absent")
		p.Claimed(mustPut(t, p, "leak_claimed", []byte("x")))
		p.Cleanup("leak_1")
		p.Close()
		Sweep(SweepOptions{ListOptions: ListOptions{Dir: dir, Grace: time.Nanosecond}})
	}
	round() // let the runtime open what it keeps
	before := count()
	for range 20 {
		round()
	}
	if after := count(); after != before {
		t.Fatalf("%d descriptors open before, %d after", before, after)
	}
}
