//go:build linux

package connector

import (
	"fmt"
	"strconv"
	"sync"

	"omnishm/config"
)

// Factory builds a connector from its configuration. It validates the
// configuration itself; its error needs no further context.
type Factory func(c config.Connector) (Receiver, error)

var (
	factoriesMu sync.RWMutex
	factories   = map[string]Factory{config.SharedMemoryConnector: newSHM}
)

// Register makes a connector available to New under name (a configuration's
// `name`). A transport for stages on other hosts registers here too,
// usually from its package's init function. A later Register of the same
// name replaces the earlier one.
func Register(name string, f Factory) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	factories[name] = f
}

// New builds the connector named by c.Name. The caller owns it and must
// Close it. The error wraps ErrUnknownConnector for a name nothing is
// registered under, else it is the factory's.
func New(c config.Connector) (Receiver, error) {
	factoriesMu.RLock()
	f, ok := factories[c.Name]
	factoriesMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownConnector, c.Name)
	}
	return f(c)
}

// OptionsFrom maps a validated configuration onto Options: host_ring_bytes
// through RingBytes (0 is NoRing), stage_id onto StageID.
func OptionsFrom(c config.Connector) Options {
	o := Options{HostRingBytes: RingBytes(c.Extra.HostRingBytes), WakeupScope: c.Extra.WakeupScope}
	if c.Extra.StageID != config.NoStage {
		o.StageID = Stage(strconv.Itoa(c.Extra.StageID))
	}
	return o
}

func newSHM(c config.Connector) (Receiver, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s, err := Open(OptionsFrom(c))
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return s, nil
}
