package connector

import (
	"fmt"
	"strconv"
	"sync"

	"omnishm/config"
)

// Factory builds a Transport from its configuration.
type Factory func(c config.Connector) (Transport, error)

var (
	factoriesMu sync.RWMutex
	factories   = map[string]Factory{config.SharedMemoryConnector: newSHM}
)

// Register makes a connector available to New under name (a configuration's
// `name`). A remote transport for stages on other hosts registers here too.
func Register(name string, f Factory) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	factories[name] = f
}

// New builds the connector named by c.Name. Each factory validates its
// own configuration.
func New(c config.Connector) (Transport, error) {
	factoriesMu.RLock()
	f, ok := factories[c.Name]
	factoriesMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownConnector, c.Name)
	}
	return f(c)
}

// OptionsFrom maps a validated configuration onto Options.
func OptionsFrom(c config.Connector) Options {
	o := DefaultOptions()
	o.HostRingBytes = c.Extra.HostRingBytes
	o.WakeupScope = c.Extra.WakeupScope
	if c.Extra.StageID >= 0 {
		o.StageID = strconv.Itoa(c.Extra.StageID)
	}
	return o
}

func newSHM(c config.Connector) (Transport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return Open(OptionsFrom(c))
}
