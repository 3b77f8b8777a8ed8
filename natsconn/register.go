//go:build linux

package natsconn

import (
	"strconv"

	"omnishm/config"
	"omnishm/connector"
)

func init() {
	connector.Register(config.NatsConnector, newFromConfig)
}

// OptionsFrom maps a NatsConnector configuration onto Options; zero
// settings keep the defaults.
func OptionsFrom(c config.Connector) Options {
	o := Options{Nats: c.Extra.Nats}
	if c.Extra.StageID >= 0 {
		o.StageID = connector.Stage(strconv.Itoa(c.Extra.StageID))
	}
	return o
}

func newFromConfig(c config.Connector) (connector.Receiver, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c2, err := Open(OptionsFrom(c))
	if err != nil {
		return nil, err // a nil interface, not a typed nil
	}
	return c2, nil
}
