//go:build linux

package connector_test

import (
	"errors"
	"testing"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
)

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
