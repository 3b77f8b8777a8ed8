//go:build linux

package connector_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

// bigCodes is over a quarter of the default ring: it takes the per-key path.
func bigCodes() map[string]any { return conntest.Codes(200000, 0) }

// putBoth puts one ring publication and one per-key one on c.
func putBoth(t *testing.T, c *connector.SHM) (keys []string, files []string) {
	t.Helper()
	small, big := shmtest.Key("shut-ring"), shmtest.Key("shut-big")
	dr := conntest.MustPut(t, c, "0", "1", small, conntest.Codes(8, 1))
	db := conntest.MustPut(t, c, "0", "1", big, bigCodes())
	if dr.HostRing == nil || db.Shm == nil {
		t.Fatalf("descriptors %v %v: want one ring frame, one segment", dr, db)
	}
	return []string{small, big}, []string{scope.Path(dr.HostRing.Name), scope.Path(big), scope.Path(scope.LockName(big))}
}

// refusing waits until Shutdown refuses puts: each put before that
// replaces key's publication (Shutdown then waits for the latest).
func refusing(t *testing.T, c *connector.SHM, key string, v any) {
	t.Helper()
	shmtest.Eventually(t, wait, "Shutdown to refuse puts", func() bool {
		_, _, err := c.Put("0", "1", key, v)
		if err != nil && !errors.Is(err, connector.ErrClosed) {
			t.Fatalf("put during Shutdown: %v", err)
		}
		return err != nil
	})
}

func gone(t *testing.T, files []string) {
	t.Helper()
	for _, f := range files {
		if _, err := os.Lstat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Shutdown: %v", f, err)
		}
	}
}

// With consumers in another process, Shutdown refuses new puts, waits
// until they have claimed both publications, and returns nil.
func TestShutdownWaitsForConsumers(t *testing.T) {
	s := shmtest.Scope(t)
	sender := conntest.Open(t, s, "0", ring.DefaultCapacity)
	keys, files := putBoth(t, sender)
	var readers []*shmtest.Proc
	for _, k := range keys {
		r := shmtest.Start(t, "receiver", s, k)
		if l := r.Line(t, wait); l != "ready" {
			t.Fatal(l)
		}
		readers = append(readers, r)
	}
	done := make(chan error, 1)
	go func() { done <- sender.Shutdown(context.Background()) }()
	refusing(t, sender, keys[0], conntest.Codes(8, 1))
	// One consumer at a time: a Get never waits for a ring lock, so two
	// at once may make one miss.
	for _, r := range readers {
		notYet(t, done) // a publication is still unclaimed
		r.Send(t, "go")
		if l := r.Line(t, wait); l == "miss" {
			t.Fatal("a consumer missed its publication")
		}
		if err := r.Wait(t, wait); err != nil {
			t.Fatal(err)
		}
	}
	if err := result(t, done); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	gone(t, files)
	if _, _, err := sender.Put("0", "1", shmtest.Key("after"), conntest.Codes(1, 0)); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("put after Shutdown: %v", err)
	}
	if err := sender.Shutdown(context.Background()); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("second Shutdown: %v", err)
	}
}

// Without a consumer, Shutdown returns ctx's error once ctx ends, and the
// close it makes then leaves nothing in /dev/shm.
func TestShutdownWithoutConsumer(t *testing.T) {
	sender, receiver := conntest.Edge(t, ring.DefaultCapacity)
	keys, files := putBoth(t, sender)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sender.Shutdown(ctx) }()
	refusing(t, sender, keys[1], bigCodes())
	notYet(t, done)
	cancel()
	if err := result(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown: %v, want context.Canceled", err)
	}
	gone(t, files)
	for _, k := range keys {
		conntest.Missing(t, receiver, "0", "1", k, nil)
	}
}
