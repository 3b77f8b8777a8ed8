//go:build linux

package bench

import (
	"fmt"
	"slices"
	"strconv"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/frame"
	"omnishm/natsconn"
)

// endpointSettings are the settings both ends of a run open their connectors
// with: this process and the receiver process, which gets them in each
// request.
type endpointSettings struct {
	Scope     string      `json:"scope"`      // the shared-memory transports' wakeup scope
	RingBytes int         `json:"ring_bytes"` // the ring transport's capacity
	Nats      config.Nats `json:"nats"`       // the nats transport's settings
	// Supplied: receives decode into one recycled buffer (Plan.Supplied).
	Supplied bool `json:"supplied,omitempty"`
}

// endpoints are the plan's, once resolved (and, for nats, its server
// started).
func (p Plan) endpoints() endpointSettings {
	return endpointSettings{Scope: p.Scope, RingBytes: p.RingBytes, Nats: p.Nats, Supplied: p.Supplied}
}

// supplied is the recycled memory a receiver of payloads of up to size
// msgpack bytes decodes into under Plan.Supplied, nil without it or for a
// connector that cannot: room for the whole form (a per-key segment is
// read whole) and the alignment of its tensors.
func (e endpointSettings) supplied(conn connector.Transport, size int) (connector.IntoReceiver, *recycled) {
	into, ok := conn.(connector.IntoReceiver)
	if !e.Supplied || !ok {
		return nil, nil
	}
	return into, &recycled{buf: make([]byte, size+4096)}
}

// recycled is one buffer every receive decodes into again.
type recycled struct {
	buf   []byte
	arena frame.Arena
}

// next is the arena for the next receive: the whole buffer again.
func (r *recycled) next() *frame.Arena {
	r.arena.Reset(r.buf)
	return &r.arena
}

// open opens a connector of transport as stage ("" for the producer),
// through the connector factory.
func (e endpointSettings) open(transport, stage string) (connector.Receiver, error) {
	c := config.Connector{Name: config.SharedMemoryConnector, Extra: config.Extra{WakeupScope: e.Scope, StageID: config.NoStage}}
	switch transport {
	case Ring:
		c.Extra.HostRingBytes = e.RingBytes
	case PerKey: // host_ring_bytes 0: per-key segments only
	case Nats:
		c = config.Connector{Name: config.NatsConnector, Extra: config.Extra{Nats: e.Nats, StageID: config.NoStage}}
	default:
		return nil, fmt.Errorf("bench: transport %q has no connector", transport)
	}
	if stage != "" {
		var err error
		if c.Extra.StageID, err = strconv.Atoi(stage); err != nil {
			return nil, fmt.Errorf("bench: stage %q: %w", stage, err)
		}
	}
	return connector.New(c)
}

// startNats starts the embedded server a plan that times nats over no
// given server needs, and returns what stops it (nothing to stop
// otherwise).
func (p *Plan) startNats() (stop func(), err error) {
	if p.Nats.URL != "" || !slices.Contains(p.Transports, Nats) {
		return func() {}, nil
	}
	url, stop, err := natsconn.StartEmbedded("")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	p.Nats.URL = url
	return stop, nil
}
