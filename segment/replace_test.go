//go:build linux

package segment

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// Publishing a key again: an unclaimed segment of this producer is
// replaced; another producer's, published after a claim, is never taken
// for this producer's own.

func TestReputReplacesUnclaimed(t *testing.T) {
	var created, removed []string
	var mu sync.Mutex
	p := NewProducer(Options{
		OnCreate: func(s string) { mu.Lock(); created = append(created, s); mu.Unlock() },
		OnRemove: func(s string) { mu.Lock(); removed = append(removed, s); mu.Unlock() },
	})
	defer p.Close()
	key := shmtest.Key("reput")
	mustPut(t, p, key, []byte("first, and longer"))
	mustPut(t, p, key, []byte("second"))
	reader := shmtest.Start(t, "claim")
	reader.Send(t, key)
	if l := reader.Line(t, wait); l != "got "+shmtest.Digest([]byte("second")) {
		t.Fatalf("receiver: %s, want the second value", l)
	}
	keyGone(t, DefaultDir, key)
	path := DefaultDir + "/" + key
	hooks := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(created, removed)
	}
	// The re-put names the new file under the same path: no OnRemove.
	if got, want := hooks(), fmt.Sprint([]string{path, path}, []string(nil)); got != want {
		t.Fatalf("hooks: created, removed = %v, want %v", got, want)
	}
	// The next put's sweep learns that the key was consumed.
	other := shmtest.Key("reput-other")
	mustPut(t, p, other, []byte{1})
	if p.Pending(key) || !p.Pending(other) {
		t.Fatalf("pending after sweep: %v %v", p.Pending(key), p.Pending(other))
	}
	otherPath := DefaultDir + "/" + other
	if got, want := hooks(), fmt.Sprint([]string{path, path, otherPath}, []string{path}); got != want {
		t.Fatalf("consumed key not reported removed: created, removed = %v, want %v", got, want)
	}
}

// A producer retires only the segment it wrote: once a receiver claimed it
// and another process published the key again, Cleanup and Close leave
// that publication and its lock file alone.
func TestRetireLeavesAnotherProducersRepublication(t *testing.T) {
	for _, how := range []string{"cleanup", "close"} {
		t.Run(how, func(t *testing.T) {
			p := newProducer(t)
			key := shmtest.Key("republished")
			mustPut(t, p, key, []byte("ours"))
			mustClaim(t, "", key)
			other := shmtest.Start(t, "put", key, "100", "9")
			other.Expect(t, wait, "put")
			switch how {
			case "cleanup":
				if ok, err := p.Cleanup(key); ok || err != nil {
					t.Errorf("Cleanup = %v, %v: retired another producer's segment", ok, err)
				}
			case "close":
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
			}
			shmtest.AssertPresent(t, DefaultDir+"/"+scope.LockName(key))
			if got := mustClaim(t, "", key); !bytes.Equal(got, shmtest.Payload(100, 9)) {
				t.Fatalf("claimed %q, want the other producer's payload", got)
			}
			other.Send(t, "close")
			other.Exited(t, wait)
			keyGone(t, DefaultDir, key)
		})
	}
}
