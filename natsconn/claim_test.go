//go:build linux

package natsconn

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/conntest"
)

// waitClaimedAsync runs WaitClaimed in a goroutine; its result arrives on
// the channel.
func waitClaimedAsync(c *Connector, ctx context.Context, d Descriptor) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.WaitClaimed(ctx, d) }()
	return done
}

func waitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(wait):
		t.Fatal("WaitClaimed did not return")
		return nil
	}
}

// Each way a publication ends, seen by a WaitClaimed under way and by
// Claimed afterwards.
func TestWaitClaimed(t *testing.T) {
	ts := startServer(t)
	cases := []struct {
		name      string
		end       func(t *testing.T, sender, receiver *Connector, key string)
		retired   string // "" for a claim
		snapshot  bool   // Claimed still tells afterwards
		claimedIs bool
	}{
		{"claimed by a receiver", func(t *testing.T, _, r *Connector, key string) { conntest.MustGet(t, r, "0", "1", key, nil) }, "", true, true},
		{"received by Recv", func(t *testing.T, _, r *Connector, key string) {
			if _, _, err := r.Recv(context.Background(), "0", key); err != nil {
				t.Fatal(err)
			}
		}, "", true, true},
		{"retired by Cleanup", func(t *testing.T, s, _ *Connector, key string) {
			if !s.Cleanup(key) {
				t.Fatal("nothing retired")
			}
		}, "Cleanup", true, false},
		{"retired by CleanupPrefix", func(t *testing.T, s, _ *Connector, key string) {
			if n := s.CleanupPrefix(strings.TrimSuffix(key, "7")); n != 1 {
				t.Fatalf("%d retired", n)
			}
		}, "CleanupPrefix", true, false},
		// The newer put replaced the marker-less publication: only a wait
		// under way saw it happen.
		{"replaced", func(t *testing.T, s, _ *Connector, key string) { conntest.MustPut(t, s, "0", "1", key, codes(1, 9)) }, "replaced", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sender, receiver := edge(t, ts)
			key := "req-1_0_7"
			d := conntest.MustPut(t, sender, "0", "1", key, codes(1, 1))
			if ok, err := sender.Claimed(d); ok || err != nil {
				t.Fatalf("claimed before anything: %v %v", ok, err)
			}
			seen := make(chan struct{})
			var once sync.Once
			sender.claimStep = func(step claimStep, seq uint64) {
				if step == stepWatch && seq == d.Nats.Revision {
					once.Do(func() { close(seen) })
				}
			}
			done := waitClaimedAsync(sender, context.Background(), d)
			select {
			case <-seen: // the wait is under way
			case err := <-done:
				t.Fatalf("WaitClaimed returned before the publication ended: %v", err)
			}
			c.end(t, sender, receiver, key)
			err := waitResult(t, done)
			switch {
			case c.retired == "" && err != nil:
				t.Fatalf("WaitClaimed: %v", err)
			case c.retired != "" && (!errors.Is(err, ErrRetired) || !strings.Contains(err.Error(), c.retired)):
				t.Fatalf("WaitClaimed: %v, want ErrRetired (%s)", err, c.retired)
			}
			if !c.snapshot {
				return
			}
			ok, err := sender.Claimed(d)
			if ok != c.claimedIs || (c.retired != "") != errors.Is(err, ErrRetired) {
				t.Fatalf("Claimed afterwards: %v %v", ok, err)
			}
			// A wait that starts afterwards knows at once.
			err = sender.WaitClaimed(context.Background(), d)
			if (c.retired == "") != (err == nil) {
				t.Fatalf("WaitClaimed afterwards: %v", err)
			}
		})
	}
}

// A producer of another process (another connector) waits on the claim
// just as well, and a wait ends with its context.
// A wait whose check of the subject reads it after a newer put of the key
// has replaced the publication, while its watch has delivered the
// publication and not yet the newer put: the check could only guess
// (claimed), the watch knows (replaced), and the watch decides. The hooks
// force that order: the check waits for the watch to deliver the
// publication and puts the key again before it reads; the watch delivers
// nothing more until the check is done.
func TestWaitClaimedCheckAfterAReplacement(t *testing.T) {
	sender, _ := edge(t, startServer(t))
	const key = "req-1_0_7"
	d := conntest.MustPut(t, sender, "0", "1", key, codes(1, 1))
	rev := d.Nats.Revision
	seen, checked := make(chan struct{}), make(chan struct{})
	var seenOnce, checkOnce, checkedOnce sync.Once
	replaced := make(chan error, 1)
	sender.claimStep = func(step claimStep, seq uint64) {
		switch {
		case step == stepWatch && seq == rev:
			seenOnce.Do(func() { close(seen) })
		case step == stepWatch && seq > rev:
			<-checked
		case step == stepCheck:
			checkOnce.Do(func() {
				<-seen
				_, _, err := sender.Put("0", "1", key, codes(1, 9))
				replaced <- err
			})
		case step == stepChecked:
			checkedOnce.Do(func() { close(checked) })
		}
	}
	err := waitResult(t, waitClaimedAsync(sender, context.Background(), d))
	if perr := <-replaced; perr != nil {
		t.Fatal(perr)
	}
	if !errors.Is(err, ErrRetired) || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("WaitClaimed: %v, want ErrRetired (replaced)", err)
	}
}

func TestWaitClaimedByAnotherConnectorAndItsContext(t *testing.T) {
	ts := startServer(t)
	sender, receiver := edge(t, ts)
	other := openConn(t, ts.url(), sender.opts.Bucket, "")
	d := conntest.MustPut(t, sender, "0", "1", "k", codes(1, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := other.WaitClaimed(ctx, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unclaimed: %v, want the context's deadline", err)
	}
	done := waitClaimedAsync(other, context.Background(), d)
	conntest.MustGet(t, receiver, "0", "1", "k", &d)
	if err := waitResult(t, done); err != nil {
		t.Fatal(err)
	}
	if ok, err := other.Claimed(d); !ok || err != nil {
		t.Fatalf("Claimed: %v %v", ok, err)
	}
}

func TestClaimedRefusesOtherDescriptors(t *testing.T) {
	sender, _ := edge(t, startServer(t))
	d := conntest.MustPut(t, sender, "0", "1", "k", codes(1, 1))
	otherBucket := *d.Nats
	otherBucket.Bucket = "elsewhere"
	badKey := *d.Nats
	badKey.Key = "0.1.a*b"
	beyond := *d.Nats
	beyond.Revision += 1000
	for name, bad := range map[string]Descriptor{
		"shm":          {Shm: &connector.ShmHandle{Name: "k", Size: 1}, Size: 1},
		"other bucket": {Nats: &otherBucket, Size: d.Size},
		"bad key":      {Nats: &badKey, Size: d.Size},
		"beyond":       {Nats: &beyond, Size: d.Size},
		"empty":        {},
	} {
		if _, err := sender.Claimed(bad); !errors.Is(err, descriptor.ErrBad) {
			t.Errorf("%s: Claimed: %v, want ErrBad", name, err)
		}
		if err := sender.WaitClaimed(context.Background(), bad); !errors.Is(err, descriptor.ErrBad) {
			t.Errorf("%s: WaitClaimed: %v, want ErrBad", name, err)
		}
	}
}

// Close ends a wait under way: the publication it retires is reported so,
// or the connector as closed.
func TestWaitClaimedEndsWithClose(t *testing.T) {
	sender, _ := edge(t, startServer(t))
	d := conntest.MustPut(t, sender, "0", "1", "k", codes(1, 1))
	done := waitClaimedAsync(sender, context.Background(), d)
	sender.Close()
	if err := waitResult(t, done); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrRetired) {
		t.Fatalf("WaitClaimed across Close: %v", err)
	}
}

func TestStartEmbedded(t *testing.T) {
	dir := t.TempDir()
	url, stop, err := StartEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := openConn(t, url, bucket(t), "1")
	if _, _, err := c.Put("0", "1", "k", codes(2, 5)); err != nil {
		t.Fatal(err)
	}
	if got := first(t, c, "0", "1", "k", nil); got != 5 {
		t.Fatalf("got %d", got)
	}
	c.Close()
	stop()
	stop() // idempotent
	if _, err := Open(Options{Nats: config.Nats{URL: url, Timeout: 100 * time.Millisecond}}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("open after stop: %v", err)
	}
}
