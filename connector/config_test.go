package connector

import (
	"errors"
	"testing"

	"omnishm/config"
	"omnishm/internal/shmtest"
)

func TestNewFromYAML(t *testing.T) {
	s := shmtest.Scope(t)
	cfg, err := config.Parse([]byte(`
connectors:
  shm:
    name: SharedMemoryConnector
    extra:
      host_ring_bytes: 4096
      wakeup_scope: ` + s + `
      stage_id: 0
`))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(cfg.Connectors["shm"])
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := tr.(*SHM)
	if c.opts.StageID != "0" || c.opts.HostRingBytes != 4096 || c.Names().WakeDir == "" {
		t.Fatalf("options %+v", c.opts)
	}
	if _, d, err := c.Put("0", "1", "yaml", codes(3, 0)); err != nil || d.HostRing == nil {
		t.Fatalf("put: %v %v", d, err)
	}
	if _, err := New(config.Connector{Name: "NoSuchConnector"}); err == nil {
		t.Fatal("unknown connector accepted")
	} else if !errors.Is(err, ErrUnknownConnector) && !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("unexpected error %v", err)
	}
}
