//go:build linux

package connector_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/scope"
)

func TestCancelWithoutReceiverAndExactPrefix(t *testing.T) {
	for _, ringBytes := range []int{4096, connector.NoRing} {
		sender, receiver := conntest.Edge(t, ringBytes)
		p := shmtest.Key("req") + "_0_"
		other := shmtest.Key("request") + "_0_0"
		for _, key := range []string{p + "0", p + "1", p + "10other", other} {
			conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(56, 0))
		}
		if n := sender.CleanupPrefix(p); n != 2 {
			t.Fatalf("ring=%d: cleanup-prefix retired %d, want 2", ringBytes, n)
		}
		conntest.Missing(t, receiver, "0", "1", p+"0", nil)
		conntest.Missing(t, receiver, "0", "1", p+"1", nil)
		conntest.MustGet(t, receiver, "0", "1", p+"10other", nil)
		conntest.MustGet(t, receiver, "0", "1", other, nil)
		for _, key := range []string{p + "0", p + "1"} {
			if _, err := os.Stat(scope.Path(key)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s left behind", key)
			}
		}
		if d := conntest.MustPut(t, sender, "0", "1", "next", conntest.Codes(56, 0)); ringBytes > 0 && d.HostRing == nil {
			t.Fatalf("ring credit not returned: %v", d)
		}
		if !sender.Cleanup("next") || sender.Cleanup("next") {
			t.Fatal("cleanup must report exactly one retirement")
		}
		conntest.Missing(t, receiver, "0", "1", "next", nil)
	}
}

func TestCloseIsIdempotentAndRemovesOwnedRing(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	d := conntest.MustPut(t, sender, "0", "1", "close", conntest.Codes(3, 0))
	conntest.MustGet(t, receiver, "0", "1", "close", nil)
	pending := shmtest.Key("pending")
	conntest.MustPut(t, sender, "0", "1", pending, conntest.Codes(4096, 0))
	if fifos, _ := filepath.Glob(receiver.Names().WakeDir + "/1_*"); len(fifos) != 1 {
		t.Fatalf("receiver FIFOs %v, want one", fifos)
	}
	for range 2 {
		if err := sender.Close(); err != nil {
			t.Fatal(err)
		}
		if err := receiver.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{scope.Path(d.HostRing.Name), scope.Path(pending), scope.Path(scope.LockName(pending)), sender.Names().RingDir()} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s survives close: %v", p, err)
		}
	}
	if fifos, _ := filepath.Glob(receiver.Names().WakeDir + "/1_*"); len(fifos) != 0 {
		t.Fatalf("the receiver's FIFO survives close: %v", fifos)
	}
	if _, _, err := sender.Put("0", "1", "after", conntest.Codes(3, 0)); !errors.Is(err, connector.ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
}

func TestBadKeysAreRefusedBeforeTouchingFiles(t *testing.T) {
	c := conntest.Open(t, shmtest.Scope(t), "0", connector.NoRing)
	for _, key := range []string{"", "a/b", "../etc/passwd", ".", "..", "nul\x00byte", strings.Repeat("k", 256)} {
		if _, _, err := c.Put("0", "1", key, conntest.Codes(3, 0)); err == nil {
			t.Errorf("put accepted key %q", key)
		}
		if _, _, _, err := c.Get("0", "1", key, nil); err == nil {
			t.Errorf("get accepted key %q", key)
		}
	}
}

func TestGetWithPastDeadlineMisses(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	conntest.MustPut(t, sender, "0", "1", "late", conntest.Codes(3, 0))
	if _, _, ok, err := receiver.GetWithDeadline("0", "1", "late", nil, time.Now().Add(-time.Second)); ok || err != nil {
		t.Fatalf("past deadline: ok=%v err=%v", ok, err)
	}
	if _, _, ok, _ := receiver.GetWithDeadline("0", "1", "late", nil, time.Now().Add(time.Minute)); !ok {
		t.Fatal("the publication was lost by the missed deadline")
	}
}

func TestGetContextMissesOnceDone(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	conntest.MustPut(t, sender, "0", "1", "ctx", conntest.Codes(3, 0))
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, ok, err := receiver.GetContext(done, "0", "1", "ctx", nil); ok || err != nil {
		t.Fatalf("done ctx: ok=%v err=%v", ok, err)
	}
	if _, _, ok, _ := receiver.GetContext(context.Background(), "0", "1", "ctx", nil); !ok {
		t.Fatal("the publication was lost by the cancelled get")
	}
}

func TestScopeNamesAreSharedAcrossConnectors(t *testing.T) {
	s := shmtest.Scope(t)
	a, b := conntest.Open(t, s, "0", 4096), conntest.Open(t, s, "1", 4096)
	if a.Names() != b.Names() || a.Names() != scope.New(s) {
		t.Fatal("one scope, two names")
	}
}
