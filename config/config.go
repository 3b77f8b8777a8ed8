// Package config reads the connector configuration of SPEC §9: the YAML
// `connectors` map that both endpoints of an edge share.
package config

import (
	"errors"
	"fmt"
	"omnishm/ring"
	"os"
	"strconv"
)

// SharedMemoryConnector is the name of the local transport, as in the
// Python deployment's configuration.
const SharedMemoryConnector = "SharedMemoryConnector"

// NoStage is Extra.StageID when the configuration names no stage.
const NoStage = -1

// ErrInvalid is wrapped by every error about a configuration's content.
var ErrInvalid = errors.New("invalid connector configuration")

// Config is a parsed configuration file.
type Config struct {
	// Connectors maps the configuration's own names (the YAML keys) to
	// connectors.
	Connectors map[string]Connector
}

// Connector is one entry of `connectors`.
type Connector struct {
	Name  string
	Extra Extra
}

// Extra holds a connector's `extra` settings.
type Extra struct {
	// HostRingBytes is the ring size per producer and edge; 0 means per-key
	// segments only.
	HostRingBytes int
	// WakeupScope names the deployment (SPEC §2); empty means no scope.
	WakeupScope string
	// StageID is this endpoint's stage, or NoStage.
	StageID int
}

// Default returns the shared-memory connector with every default: a 4 MiB
// ring, no scope, no stage.
func Default() Connector {
	return Connector{
		Name:  SharedMemoryConnector,
		Extra: Extra{HostRingBytes: ring.DefaultCapacity, StageID: NoStage},
	}
}

// Validate reports the first setting of c that no connector accepts, naming
// its field, wrapped with ErrInvalid.
func (c Connector) Validate() error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	if err := checkRingBytes(c.Extra.HostRingBytes); err != nil {
		return err
	}
	if c.Extra.StageID < NoStage {
		return invalid("extra.stage_id", "%d is negative", c.Extra.StageID)
	}
	return nil
}

func checkName(name string) error {
	switch name {
	case SharedMemoryConnector:
		return nil
	case "":
		return invalid("name", "missing")
	}
	return invalid("name", "unknown connector %q (known: %s)", name, SharedMemoryConnector)
}

func checkRingBytes(n int) error {
	if ring.CheckCapacity(n) != nil {
		return invalid("extra.host_ring_bytes", "%d is outside 0 or %d..%d", n, ring.MinCapacity, ring.MaxCapacity)
	}
	return nil
}

// fieldError is a problem with one field, found by its dotted path.
type fieldError struct {
	field string
	line  int
	msg   string
}

func (e *fieldError) Error() string {
	if e.line > 0 {
		return "config: line " + strconv.Itoa(e.line) + ": " + e.field + ": " + e.msg
	}
	return "config: " + e.field + ": " + e.msg
}

func (e *fieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, a ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, a...)}
}

// Load reads and parses the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
