package config

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"omnishm/ring"
)

// specText is SPEC §9's configuration exactly: no stage_id, so no stage;
// specExample adds one.
const (
	specText    = "connectors:\n  shm:\n    name: SharedMemoryConnector\n    extra:\n      host_ring_bytes: 4194304\n      wakeup_scope: my-deployment\n"
	specExample = specText + "      stage_id: 1\n"
)

func TestSpecExample(t *testing.T) {
	for _, c := range []struct {
		yaml  string
		stage int
	}{
		{specText, NoStage},
		{specExample, 1},
	} {
		cfg, err := Parse([]byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		want := Connector{Name: SharedMemoryConnector, Extra: Extra{HostRingBytes: 4194304, WakeupScope: "my-deployment", StageID: c.stage}}
		if len(cfg.Connectors) != 1 || cfg.Connectors["shm"] != want {
			t.Fatalf("%q parsed as %+v", c.yaml, cfg.Connectors)
		}
		if err := want.Validate(); err != nil {
			t.Fatal(err)
		}
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
	// inExtra rejects field: value in the extra mapping, naming the field.
	inExtra := func(name, field, value, says string) rejected {
		return rejected{name, conn("    extra:\n      " + field + ": " + value + "\n"), "connectors.shm.extra." + field, says, 0}
	}
	checkRejected(t, []rejected{
		inExtra("ring too small", "host_ring_bytes", "100", "100 is outside 0 or 4096..67108864"),
		inExtra("ring too big", "host_ring_bytes", "67108865", "outside"),
		inExtra("ring negative", "host_ring_bytes", "-4096", "outside"),
		inExtra("ring huge", "host_ring_bytes", "99999999999999999999", ""),
		inExtra("ring string", "host_ring_bytes", `"4096"`, "must be an integer"),
		inExtra("ring float", "host_ring_bytes", "4096.0", "must be an integer"),
		inExtra("ring bool", "host_ring_bytes", "true", "must be an integer"),
		inExtra("stage negative", "stage_id", "-1", "negative"),
		inExtra("stage string", "stage_id", "one", "must be an integer"),
		inExtra("stage list", "stage_id", "[1]", "got a list"),
		inExtra("scope number", "wakeup_scope", "42", "quote it"),
		inExtra("scope empty", "wakeup_scope", `""`, "empty"),
		inExtra("scope mapping", "wakeup_scope", "{a: 1}", "got a mapping"),
		inExtra("unknown extra", "host_ring", "4096", "unknown field"),
		inExtra("repeated extra", "stage_id", "1\n      stage_id: 2", "repeated"),
		{"extra list", conn("    extra: [1]\n"), "connectors.shm.extra", "must be a mapping", 0},
		{"unknown connector field", conn("    kind: x\n"), "connectors.shm.kind", "unknown field", 0},
		{"unknown name", "connectors:\n  m:\n    name: MooncakeConnector\n", "connectors.m.name", `unknown connector "MooncakeConnector"`, 0},
		{"missing name", "connectors:\n  m:\n    extra: {}\n", "connectors.m.name", "missing", 0},
		{"name number", "connectors:\n  m:\n    name: 7\n", "connectors.m.name", "must be a string", 0},
		{"connector scalar", "connectors:\n  m: SharedMemoryConnector\n", "connectors.m", "must be a mapping", 0},
		{"connectors list", "connectors: [a]\n", "connectors", "must be a mapping", 0},
		{"no connectors", "other: 1\n", "connectors", "missing", 0},
		{"empty file", "", "connectors", "missing", 0},
		{"not a mapping", "- a\n", "(document)", "must be a mapping", 0},
		{"bad yaml", "connectors: {", "", "yaml", 0},
	})
}

// rejected is a document Parse must refuse with an ErrInvalid naming field
// and saying says, at line when that is not 0.
type rejected struct {
	name, yaml, field, says string
	line                    int
}

func checkRejected(t *testing.T, cases []rejected) {
	t.Helper()
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
		if c.line != 0 && !strings.Contains(msg, "line "+strconv.Itoa(c.line)+":") {
			t.Errorf("%s: %q is not at line %d", c.name, msg, c.line)
		}
	}
}

func TestValidate(t *testing.T) {
	nats := func(n Nats) Connector { return Connector{Name: NatsConnector, Extra: Extra{StageID: NoStage, Nats: n}} }
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
		{nats(Nats{}), ""},
		{nats(Nats{URL: "nats://127.0.0.1:4222", Replicas: 5, Storage: "file", MaxAge: time.Second}), ""},
		{nats(Nats{URL: " "}), "extra.url"},
		{nats(Nats{Bucket: "a b"}), "extra.bucket"},
		{nats(Nats{ObjectStore: "a.b"}), "extra.object_store"},
		{nats(Nats{MaxAge: time.Millisecond}), "extra.max_age"},
		{nats(Nats{Timeout: -time.Second}), "extra.timeout"},
		{nats(Nats{Replicas: 6}), "extra.replicas"},
		{nats(Nats{Storage: "tape"}), "extra.storage"},
		{Connector{Name: NatsConnector, Extra: Extra{HostRingBytes: 4096, StageID: NoStage}}, "extra"},
		{Connector{Name: SharedMemoryConnector, Extra: Extra{StageID: NoStage, Nats: Nats{Bucket: "b"}}}, "extra"},
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
	if _, err := Load(path); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 5") {
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
	f.Add([]byte("connectors: {n: {name: NatsConnector, extra: {url: 'nats://h:1', max_age: 1m, replicas: 3}}}"))
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

func TestNatsConnector(t *testing.T) {
	cfg, err := Parse([]byte(`
connectors:
  remote:
    name: NatsConnector
    extra:
      url: nats://10.0.0.5:4222, nats://10.0.0.6:4222
      credentials: /etc/omnishm/stage.creds
      bucket: omni_edges
      object_store: omni-large
      max_age: 90s
      timeout: 1.5s
      replicas: 3
      storage: memory
      stage_id: 2
  plain:
    extra: {}
    name: NatsConnector
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Connector{Name: NatsConnector, Extra: Extra{StageID: 2, Nats: Nats{
		URL: "nats://10.0.0.5:4222, nats://10.0.0.6:4222", Credentials: "/etc/omnishm/stage.creds",
		Bucket: "omni_edges", ObjectStore: "omni-large", MaxAge: 90 * time.Second,
		Timeout: 1500 * time.Millisecond, Replicas: 3, Storage: "memory",
	}}}
	if got := cfg.Connectors["remote"]; got != want {
		t.Fatalf("parsed %+v\nwant   %+v", got, want)
	}
	// Every NATS setting is optional; the ring's defaults do not apply.
	if got := cfg.Connectors["plain"]; got != (Connector{Name: NatsConnector, Extra: Extra{StageID: NoStage}}) {
		t.Fatalf("plain: %+v", got)
	}
	for name, c := range cfg.Connectors {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestNatsRejected(t *testing.T) {
	extra := func(field string) string {
		return "connectors:\n  n:\n    name: NatsConnector\n    extra:\n      " + field + "\n"
	}
	checkRejected(t, []rejected{
		{"ring setting", extra("host_ring_bytes: 4096"), "connectors.n.extra.host_ring_bytes", "unknown field of a NatsConnector (known: url,", 5},
		{"scope setting", extra("wakeup_scope: x"), "connectors.n.extra.wakeup_scope", "unknown field", 5},
		{"url empty", extra(`url: ""`), "connectors.n.extra.url", "empty", 5},
		{"url list gap", extra(`url: "nats://a:4222,,nats://b:4222"`), "connectors.n.extra.url", "not a list of server URLs", 5},
		{"url number", extra("url: 4222"), "connectors.n.extra.url", "quote it", 5},
		{"credentials empty", extra(`credentials: ""`), "connectors.n.extra.credentials", "omit it for none", 5},
		{"bucket dot", extra("bucket: omni.edges"), "connectors.n.extra.bucket", "only letters, digits", 5},
		{"object store slash", extra("object_store: a/b"), "connectors.n.extra.object_store", "only letters", 5},
		{"max age number", extra("max_age: 600"), "connectors.n.extra.max_age", `must be a duration such as "10m"`, 5},
		{"max age short", extra("max_age: 500ms"), "connectors.n.extra.max_age", "500ms is under 1s", 5},
		{"max age list", extra("max_age: [1m]"), "connectors.n.extra.max_age", "got a list", 5},
		{"timeout zero", extra("timeout: 0s"), "connectors.n.extra.timeout", "0s is under 1ms", 5},
		{"timeout words", extra("timeout: soon"), "connectors.n.extra.timeout", "got soon", 5},
		{"replicas zero", extra("replicas: 0"), "connectors.n.extra.replicas", "outside 1..5", 5},
		{"replicas six", extra("replicas: 6"), "connectors.n.extra.replicas", "outside 1..5", 5},
		{"storage", extra("storage: disk"), "connectors.n.extra.storage", "neither file nor memory", 5},
		{"stage negative", extra("stage_id: -2"), "connectors.n.extra.stage_id", "negative", 5},
		{"nats setting on shm", "connectors:\n  s:\n    name: SharedMemoryConnector\n    extra: {url: nats://x}\n",
			"connectors.s.extra.url", "unknown field of a SharedMemoryConnector (known: host_ring_bytes, wakeup_scope, stage_id)", 4},
	})
}
