//go:build linux

package segment

import (
	"slices"
	"sync"
	"testing"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
)

// Claimed: a producer tells "still waiting" from "claimed", including
// "claimed, then published again by another producer", by the identity of
// the file it wrote.
func TestClaimed(t *testing.T) {
	claimed := func(t *testing.T, p *Producer, d descriptor.ShmHandle) bool {
		t.Helper()
		ok, err := p.Claimed(d)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	cases := []struct {
		name string
		// after the put, before Claimed; it reports what Claimed must say.
		then func(t *testing.T, p *Producer, key string) bool
	}{
		{"waiting", func(*testing.T, *Producer, string) bool { return false }},
		{"claimed here", func(t *testing.T, _ *Producer, key string) bool {
			mustClaim(t, "", key)
			return true
		}},
		{"claimed by another process", func(t *testing.T, _ *Producer, key string) bool {
			r := shmtest.Start(t, "claim")
			r.Send(t, key)
			if l := r.Line(t, wait); l == "miss" {
				t.Fatalf("receiver: %s", l)
			}
			return true
		}},
		{"claimed and published again by another producer", func(t *testing.T, _ *Producer, key string) bool {
			mustClaim(t, "", key)
			other := shmtest.Start(t, "put", key, "10", "1")
			other.Expect(t, wait, "put")
			t.Cleanup(func() {
				mustClaim(t, "", key)
				other.Send(t, "close")
				other.Wait(t, wait)
			})
			return true
		}},
		{"retired", func(t *testing.T, p *Producer, key string) bool {
			if ok, err := p.Cleanup(key); !ok || err != nil {
				t.Fatalf("cleanup: %v %v", ok, err)
			}
			return true
		}},
		{"published again by this producer", func(t *testing.T, p *Producer, key string) bool {
			mustPut(t, p, key, []byte("newer"))
			return false
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var removed []string
			p := NewProducer(Options{OnRemove: func(s string) { mu.Lock(); removed = append(removed, s); mu.Unlock() }})
			defer p.Close()
			key := shmtest.Key("claimed")
			d := mustPut(t, p, key, []byte("payload"))
			want := c.then(t, p, key)
			mu.Lock()
			before := len(removed)
			mu.Unlock()
			if got := claimed(t, p, d); got != want {
				t.Fatalf("Claimed = %v, want %v", got, want)
			}
			if got := claimed(t, p, d); got != want {
				t.Fatalf("Claimed again = %v, want %v", got, want)
			}
			if p.Pending(key) == want {
				t.Fatalf("Pending = %v after Claimed = %v", !want, want)
			}
			// OnRemove hears of a publication that is over exactly once,
			// and never of one that still waits.
			mu.Lock()
			after := slices.Clone(removed)
			mu.Unlock()
			if want && !slices.Equal(after, []string{DefaultDir + "/" + key}) || !want && len(after) != before {
				t.Fatalf("OnRemove: %v (%d before Claimed)", after, before)
			}
			if !want {
				mustClaim(t, "", key)
			}
		})
	}
}
