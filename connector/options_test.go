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
	"omnishm/ring"
	"omnishm/scope"
)

// The zero Options are the defaults: a ring, wakeups on (a stage gets its
// FIFO). DisableWakeups and NoRing turn them off.
func TestZeroOptionsAreTheDefaults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       connector.Options
		ring, fifo bool
	}{
		{"zero", connector.Options{}, true, true},
		{"no ring", connector.Options{HostRingBytes: connector.NoRing}, false, true},
		{"no wakeups", connector.Options{DisableWakeups: true}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.WakeupScope, o.StageID = shmtest.Scope(t), "1"
			receiver, err := connector.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			defer receiver.Close()
			o.StageID = "0"
			sender, err := connector.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			defer sender.Close()
			fifos, _ := filepath.Glob(receiver.Names().WakeDir + "/1_*")
			if (len(fifos) == 1) != tc.fifo {
				t.Fatalf("FIFOs %v", fifos)
			}
			key := shmtest.Key("zero")
			if d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 0)); (d.HostRing != nil) != tc.ring {
				t.Fatalf("took %v", d)
			}
			conntest.MustGet(t, receiver, "0", "1", key, nil)
		})
	}
}

// Malformed stage ids and ring sizes are refused at Open, before anything
// is created, with an error callers can branch on.
func TestOpenRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts connector.Options
		want error
	}{
		{connector.Options{StageID: "talker"}, connector.ErrBadStage},
		{connector.Options{StageID: "-1"}, connector.ErrBadStage},
		{connector.Options{StageID: " 1"}, connector.ErrBadStage},
		{connector.Options{StageID: "1/2"}, connector.ErrBadStage},
		{connector.Options{StageID: "１"}, connector.ErrBadStage}, // not ASCII
		{connector.Options{HostRingBytes: 100}, ring.ErrCapacity},
		{connector.Options{HostRingBytes: -2}, ring.ErrCapacity},
		{connector.Options{HostRingBytes: ring.MaxCapacity + 1}, ring.ErrCapacity},
	} {
		s := shmtest.Scope(t)
		tc.opts.WakeupScope = s
		if c, err := connector.Open(tc.opts); !errors.Is(err, tc.want) {
			if c != nil {
				c.Close()
			}
			t.Errorf("Open(%+v) = %v, want %v", tc.opts, err, tc.want)
		}
		if _, err := os.Stat(scope.New(s).WakeDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Open(%+v) created %s", tc.opts, scope.New(s).WakeDir)
		}
	}
	for _, s := range []string{"0", "12", "007"} {
		if st, err := connector.ParseStage(s); err != nil || string(st) != s {
			t.Errorf("ParseStage(%q) = %q, %v", s, st, err)
		}
	}
	if _, err := connector.ParseStage(""); !errors.Is(err, connector.ErrBadStage) {
		t.Errorf("ParseStage(\"\") = %v", err)
	}
}

// Recv on an endpoint without a stage cannot be served: it fails at once.
func TestRecvWithoutStage(t *testing.T) {
	c := conntest.Open(t, shmtest.Scope(t), connector.NoStage, connector.NoRing)
	if _, _, err := c.Recv(t.Context(), "0", "k"); !errors.Is(err, connector.ErrBadStage) {
		t.Fatalf("recv: %v", err)
	}
}

// Each layer adds its context once: the connector the operation and the
// key, the packages below the file; sentinels survive the wrapping.
func TestErrorsCarryContextOnce(t *testing.T) {
	sender, receiver := conntest.Edge(t, 4096)
	key := shmtest.Key("ctx")
	conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 0))
	for _, tc := range []struct {
		desc *connector.Descriptor
		want error
	}{
		{&connector.Descriptor{}, connector.ErrBadDescriptor},
		{&connector.Descriptor{HostRing: &connector.RingHandle{Name: "not-a-ring"}}, connector.ErrBadDescriptor},
	} {
		_, _, ok, err := receiver.Get("0", "1", key, tc.desc)
		if ok || !errors.Is(err, tc.want) {
			t.Fatalf("get with %+v: ok=%v err=%v, want %v", tc.desc, ok, err, tc.want)
		}
		if msg := err.Error(); strings.Count(msg, "connector:") != 1 || !strings.HasPrefix(msg, `connector: get "`+key+`": `) {
			t.Fatalf("error %q: want one connector context naming the key", msg)
		}
	}
	// A segment holding garbage: the layer below says what is wrong.
	bad := shmtest.Key("garbage")
	for name, data := range map[string][]byte{bad: {0xc1, 0xc1}, scope.LockName(bad): nil} {
		if err := os.WriteFile(scope.Path(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(scope.Path(name)) })
	}
	_, _, _, err := receiver.Get("0", "1", bad, nil)
	if err == nil || strings.Count(err.Error(), "connector:") != 1 || !strings.HasPrefix(err.Error(), `connector: get "`+bad+`": `) {
		t.Fatalf("get of garbage: %v", err)
	}
	t.Log(err)
	for _, key := range []string{"", "a/b"} {
		_, _, err := sender.Put("0", "1", key, 1)
		if !errors.Is(err, connector.ErrBadKey) || strings.Count(err.Error(), "connector:") != 1 {
			t.Fatalf("put %q: %v", key, err)
		}
	}
}

// An empty stage id in an edge is refused at the call, before anything is
// touched; other strings are stages of the per-key path (SPEC §9).
func TestEmptyStageRefused(t *testing.T) {
	c := conntest.Open(t, shmtest.Scope(t), "1", 0)
	key := shmtest.Key("empty")
	calls := map[string]func() error{
		"put from": func() error { _, _, err := c.Put("", "1", key, 1); return err },
		"put to":   func() error { _, _, err := c.Put("0", "", key, 1); return err },
		"get":      func() error { _, _, _, err := c.Get("", "1", key, nil); return err },
		"recv":     func() error { _, _, err := c.Recv(t.Context(), "", key); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, connector.ErrBadStage) || !strings.Contains(err.Error(), "empty stage id") {
			t.Errorf("%s: %v, want ErrBadStage", name, err)
		}
	}
	shmtest.AssertAbsent(t, shmtest.KeyFiles(scope.ShmDir, key)...)
	if h := c.Health(); h.Puts != 0 || h.HostRingFallbacks != 0 {
		t.Errorf("refused puts counted: %+v", h)
	}
}

// A Recv that times out says where it looked and what it saw on the edge,
// and still matches context.DeadlineExceeded.
func TestRecvTimeoutSaysWhatItSaw(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, scope, key string)
		want  []string
	}{
		{"nothing", func(*testing.T, string, string) {}, []string{"no producer ring on the edge", "no per-key segment of the key"}},
		{"live producer", func(t *testing.T, s, key string) {
			conntest.MustPut(t, conntest.Open(t, s, "0", 0), "0", "1", key+"x", conntest.Codes(2, 0))
		}, []string{"1 ring of a live producer on the edge"}},
		{"other edge", func(t *testing.T, s, key string) {
			conntest.MustPut(t, conntest.Open(t, s, "2", 0), "2", "1", key, conntest.Codes(2, 0))
		}, []string{"no producer ring on the edge", "rings of other edges to stage 1: 2->1"}},
		{"other scope", func(t *testing.T, _, key string) {
			other := shmtest.Scope(t)
			conntest.MustPut(t, conntest.Open(t, other, "0", 0), "0", "1", key, conntest.Codes(2, 0))
		}, []string{"no producer ring on the edge", "rings of this edge in another scope", "same WakeupScope"}},
		{"locked segment", func(t *testing.T, s, key string) {
			conntest.MustPut(t, conntest.Open(t, s, "0", connector.NoRing), "0", "1", key, conntest.Codes(2, 0))
			shmtest.HoldLock(t, scope.Path(scope.LockName(key)))
		}, []string{"a per-key segment of the key", "present but not claimed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, key := shmtest.Scope(t), shmtest.Key("timeout")
			tc.setup(t, s, key)
			c := conntest.Open(t, s, "1", 0)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
			defer cancel()
			_, _, err := c.Recv(ctx, "0", key)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("recv: %v, want DeadlineExceeded", err)
			}
			var te *connector.RecvTimeoutError
			if !errors.As(err, &te) || te.Scope != s || te.From != "0" || te.To != "1" || te.Key != key {
				t.Fatalf("recv: %#v, want a RecvTimeoutError of the call", err)
			}
			for _, w := range append([]string{`scope "` + s + `"`, "edge 0->1"}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A Recv whose ctx is cancelled returns ctx.Err() itself: only a deadline
// makes a RecvTimeoutError.
func TestRecvCancelledIsCanceled(t *testing.T) {
	c := conntest.Open(t, shmtest.Scope(t), "1", 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := c.Recv(ctx, "0", shmtest.Key("cancel")); err != context.Canceled {
		t.Fatalf("recv: %v, want context.Canceled", err)
	}
}
