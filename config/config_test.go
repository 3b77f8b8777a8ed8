package config

import (
	"errors"
	"omnishm/ring"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const specExample = `
connectors:
  shm:
    name: SharedMemoryConnector
    extra:
      host_ring_bytes: 4194304
      wakeup_scope: my-deployment
      stage_id: 1
`

func TestSpecExample(t *testing.T) {
	cfg, err := Parse([]byte(specExample))
	if err != nil {
		t.Fatal(err)
	}
	want := Connector{Name: SharedMemoryConnector, Extra: Extra{HostRingBytes: 4194304, WakeupScope: "my-deployment", StageID: 1}}
	if len(cfg.Connectors) != 1 || cfg.Connectors["shm"] != want {
		t.Fatalf("parsed %+v", cfg.Connectors)
	}
	if err := want.Validate(); err != nil {
		t.Fatal(err)
	}
	// SPEC §9's text exactly: no stage_id, so no stage.
	spec := "connectors:\n  shm:\n    name: SharedMemoryConnector\n    extra:\n      host_ring_bytes: 4194304\n      wakeup_scope: my-deployment\n"
	cfg, err = Parse([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	want.Extra.StageID = NoStage
	if len(cfg.Connectors) != 1 || cfg.Connectors["shm"] != want {
		t.Fatalf("SPEC §9 example parsed as %+v", cfg.Connectors)
	}
}

func TestDefaultsAndAccepted(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       Extra
	}{
		{"no extra", "connectors:\n  a:\n    name: SharedMemoryConnector\n",
			Extra{HostRingBytes: ring.DefaultCapacity, StageID: NoStage}},
		{"null extra", "connectors:\n  a:\n    name: SharedMemoryConnector\n    extra:\n",
			Extra{HostRingBytes: ring.DefaultCapacity, StageID: NoStage}},
		{"ring off", "connectors:\n  a:\n    name: SharedMemoryConnector\n    extra: {host_ring_bytes: 0}\n",
			Extra{HostRingBytes: 0, StageID: NoStage}},
		{"bounds", "connectors:\n  a:\n    name: SharedMemoryConnector\n    extra: {host_ring_bytes: 67108864, stage_id: 0}\n",
			Extra{HostRingBytes: ring.MaxCapacity, StageID: 0}},
		{"null values are absent", "connectors:\n  a:\n    name: SharedMemoryConnector\n    extra: {host_ring_bytes: ~, wakeup_scope: null, stage_id: ~}\n",
			Extra{HostRingBytes: ring.DefaultCapacity, StageID: NoStage}},
		{"other sections ignored", "stage_args: [1, 2]\nconnectors:\n  a: &base\n    name: SharedMemoryConnector\n    extra: {host_ring_bytes: 4096, wakeup_scope: '42'}\n",
			Extra{HostRingBytes: 4096, WakeupScope: "42", StageID: NoStage}},
	}
	for _, c := range cases {
		cfg, err := Parse([]byte(c.yaml))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := cfg.Connectors["a"]; got.Extra != c.want || got.Name != SharedMemoryConnector {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if d := Default(); d.Validate() != nil || d.Extra.HostRingBytes != 4<<20 || d.Extra.StageID != -1 || d.Extra.WakeupScope != "" {
		t.Fatalf("Default() = %+v", d)
	}
}

func TestRejected(t *testing.T) {
	conn := func(body string) string {
		return "connectors:\n  shm:\n    name: SharedMemoryConnector\n" + body
	}
	extra := func(field string) string { return conn("    extra:\n      " + field + "\n") }
	cases := []struct {
		name, yaml, field, says string
	}{
		{"ring too small", extra("host_ring_bytes: 100"), "connectors.shm.extra.host_ring_bytes", "100 is outside 0 or 4096..67108864"},
		{"ring too big", extra("host_ring_bytes: 67108865"), "connectors.shm.extra.host_ring_bytes", "outside"},
		{"ring negative", extra("host_ring_bytes: -4096"), "connectors.shm.extra.host_ring_bytes", "outside"},
		{"ring huge", extra("host_ring_bytes: 99999999999999999999"), "connectors.shm.extra.host_ring_bytes", ""},
		{"ring string", extra(`host_ring_bytes: "4096"`), "connectors.shm.extra.host_ring_bytes", "must be an integer"},
		{"ring float", extra("host_ring_bytes: 4096.0"), "connectors.shm.extra.host_ring_bytes", "must be an integer"},
		{"ring bool", extra("host_ring_bytes: true"), "connectors.shm.extra.host_ring_bytes", "must be an integer"},
		{"stage negative", extra("stage_id: -1"), "connectors.shm.extra.stage_id", "negative"},
		{"stage string", extra("stage_id: one"), "connectors.shm.extra.stage_id", "must be an integer"},
		{"stage list", extra("stage_id: [1]"), "connectors.shm.extra.stage_id", "got a list"},
		{"scope number", extra("wakeup_scope: 42"), "connectors.shm.extra.wakeup_scope", "quote it"},
		{"scope empty", extra(`wakeup_scope: ""`), "connectors.shm.extra.wakeup_scope", "empty"},
		{"scope mapping", extra("wakeup_scope: {a: 1}"), "connectors.shm.extra.wakeup_scope", "got a mapping"},
		{"unknown extra", extra("host_ring: 4096"), "connectors.shm.extra.host_ring", "unknown field"},
		{"repeated extra", extra("stage_id: 1\n      stage_id: 2"), "connectors.shm.extra.stage_id", "repeated"},
		{"extra list", conn("    extra: [1]\n"), "connectors.shm.extra", "must be a mapping"},
		{"unknown connector field", conn("    kind: x\n"), "connectors.shm.kind", "unknown field"},
		{"unknown name", "connectors:\n  m:\n    name: MooncakeConnector\n", "connectors.m.name", `unknown connector "MooncakeConnector"`},
		{"missing name", "connectors:\n  m:\n    extra: {}\n", "connectors.m.name", "missing"},
		{"name number", "connectors:\n  m:\n    name: 7\n", "connectors.m.name", "must be a string"},
		{"connector scalar", "connectors:\n  m: SharedMemoryConnector\n", "connectors.m", "must be a mapping"},
		{"connectors list", "connectors: [a]\n", "connectors", "must be a mapping"},
		{"no connectors", "other: 1\n", "connectors", "missing"},
		{"empty file", "", "connectors", "missing"},
		{"not a mapping", "- a\n", "(document)", "must be a mapping"},
		{"bad yaml", "connectors: {", "", "yaml"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml))
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v does not wrap ErrInvalid", c.name, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.field+": ") || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %q does not name %q with %q", c.name, msg, c.field, c.says)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		c     Connector
		field string
	}{
		{Default(), ""},
		{Connector{Name: SharedMemoryConnector, Extra: Extra{StageID: NoStage}}, ""},
		{Connector{Name: "Other", Extra: Extra{StageID: NoStage}}, "name"},
		{Connector{Extra: Extra{StageID: NoStage}}, "name"},
		{Connector{Name: SharedMemoryConnector, Extra: Extra{HostRingBytes: 4095, StageID: NoStage}}, "extra.host_ring_bytes"},
		{Connector{Name: SharedMemoryConnector, Extra: Extra{HostRingBytes: -1, StageID: NoStage}}, "extra.host_ring_bytes"},
		{Connector{Name: SharedMemoryConnector, Extra: Extra{StageID: -2}}, "extra.stage_id"},
	}
	for _, c := range cases {
		err := c.c.Validate()
		if c.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.c, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "config: "+c.field+": ") {
			t.Errorf("%+v: %v, want an error about %s", c.c, err, c.field)
		}
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "omni.yaml")
	if err := os.WriteFile(path, []byte(specExample), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil || cfg.Connectors["shm"].Extra.StageID != 1 {
		t.Fatalf("%+v %v", cfg, err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(specExample, "4194304", "100", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 6") {
		t.Fatalf("bad file: %v", err)
	}
	if _, err := Load(path + ".missing"); err == nil || errors.Is(err, ErrInvalid) {
		t.Fatalf("missing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(specExample))
	f.Add([]byte("connectors:\n  a: &x {name: SharedMemoryConnector}\n  b: *x\n"))
	f.Add([]byte("connectors: {a: {name: SharedMemoryConnector, extra: {host_ring_bytes: 0}}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for name, c := range cfg.Connectors {
			if err := c.Validate(); err != nil {
				t.Fatalf("parsed %s but it does not validate: %v", name, err)
			}
		}
	})
}
