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

	"omnishm/config"
	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
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
	shmtest.Eventually(t, shmtest.Patience, "Shutdown to refuse puts", func() bool {
		_, _, err := c.Put("0", "1", key, v)
		if err != nil && !errors.Is(err, connector.ErrClosed) {
			t.Fatalf("put during Shutdown: %v", err)
		}
		return err != nil
	})
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
		r.Expect(t, shmtest.Patience, "ready")
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
		if l := r.Line(t, shmtest.Patience); l == "miss" {
			t.Fatal("a consumer missed its publication")
		}
		r.Exited(t, shmtest.Patience)
	}
	if err := result(t, done); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	shmtest.AssertAbsent(t, files...)
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
	shmtest.AssertAbsent(t, files...)
	for _, k := range keys {
		conntest.Missing(t, receiver, "0", "1", k, nil)
	}
}

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

// OptionsFrom keeps host_ring_bytes: 0 meaning "no ring" (SPEC §9) although
// the zero Options mean a default ring.
func TestOptionsFrom(t *testing.T) {
	for _, tc := range []struct {
		extra config.Extra
		want  connector.Options
	}{
		{config.Extra{HostRingBytes: 4096, WakeupScope: "d", StageID: 0}, connector.Options{HostRingBytes: 4096, WakeupScope: "d", StageID: "0"}},
		{config.Extra{HostRingBytes: 0, StageID: 12}, connector.Options{HostRingBytes: connector.NoRing, StageID: "12"}},
		{config.Default().Extra, connector.Options{HostRingBytes: 4 << 20}},
	} {
		c := config.Default()
		c.Extra = tc.extra
		if got := connector.OptionsFrom(c); got != tc.want {
			t.Errorf("OptionsFrom(%+v) = %+v, want %+v", tc.extra, got, tc.want)
		}
	}
}

// New builds a connector that receives without a type assertion, on the
// path its configuration asks for.
func TestNewFromYAML(t *testing.T) {
	for _, tc := range []struct {
		ringBytes string
		ring      bool
	}{{"4096", true}, {"0", false}} {
		s := shmtest.Scope(t)
		r, _ := conntest.FromConfig(t, `
connectors:
  shm:
    name: SharedMemoryConnector
    extra:
      host_ring_bytes: `+tc.ringBytes+`
      wakeup_scope: `+s+`
      stage_id: 1
`, "shm")
		if r.Stage() != "1" {
			t.Fatalf("stage %q", r.Stage())
		}
		sender := conntest.Open(t, s, "0", connector.NoRing)
		if tc.ring {
			sender = conntest.Open(t, s, "0", 4096)
		}
		key := shmtest.Key("yaml")
		if d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(3, 5)); (d.HostRing != nil) != tc.ring {
			t.Fatalf("host_ring_bytes %s: took %v", tc.ringBytes, d)
		}
		v, _, err := r.Recv(t.Context(), "0", key)
		if err != nil || conntest.CodesOf(t, v)[0] != 5 {
			t.Fatalf("recv: %v %v", v, err)
		}
	}
}

func TestNewRefusesUnknownNames(t *testing.T) {
	if _, err := connector.New(config.Connector{Name: "NoSuchConnector"}); !errors.Is(err, connector.ErrUnknownConnector) {
		t.Fatalf("unknown connector: %v", err)
	}
}

// A registered factory is what New returns for its name.
func TestRegister(t *testing.T) {
	s := shmtest.Scope(t)
	made := conntest.Open(t, s, "3", connector.NoRing)
	connector.Register("TestRegisterConnector", func(c config.Connector) (connector.Receiver, error) {
		return made, nil
	})
	r, err := connector.New(config.Connector{Name: "TestRegisterConnector"})
	if err != nil || r != made {
		t.Fatalf("New = %v, %v", r, err)
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

// Another transport's RecvTimeoutError says where it looked, and asks its
// saw func only when Saw (or Error) is first called, once.
func TestNewRecvTimeoutError(t *testing.T) {
	calls := 0
	te := connector.NewRecvTimeoutError(`bucket "b"`, "0", "1", "k", context.DeadlineExceeded, func() string { calls++; return "nothing there" })
	if calls != 0 || !errors.Is(te, context.DeadlineExceeded) || te.Where() != `bucket "b"` {
		t.Fatalf("calls %d, where %q, errors.Is %v", calls, te.Where(), errors.Is(te, context.DeadlineExceeded))
	}
	want := `connector: recv "k" on edge 0->1, bucket "b": nothing arrived before the deadline; saw nothing there`
	if got := te.Error(); got != want || te.Saw() != "nothing there" || calls != 1 {
		t.Errorf("Error %q (want %q), saw func called %d times", got, want, calls)
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
