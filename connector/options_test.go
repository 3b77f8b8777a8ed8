//go:build linux

package connector_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"omnishm/config"
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
		cfg, err := config.Parse([]byte(`
connectors:
  shm:
    name: SharedMemoryConnector
    extra:
      host_ring_bytes: ` + tc.ringBytes + `
      wakeup_scope: ` + s + `
      stage_id: 1
`))
		if err != nil {
			t.Fatal(err)
		}
		r, err := connector.New(cfg.Connectors["shm"])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
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
