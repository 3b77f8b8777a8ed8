package bench

import (
	"fmt"
	"slices"

	"omnishm/connector"
	"omnishm/natsconn"
)

// Endpoints are the settings both ends of a run open their connectors
// with: this process and the receiver process, which gets them in each
// request.
type Endpoints struct {
	Scope     string `json:"scope"`      // the shared-memory transports' wakeup scope
	RingBytes int    `json:"ring_bytes"` // the ring transport's capacity
	// Nats are the nats transport's options (StageID aside, which is each
	// end's own).
	Nats natsconn.Options `json:"nats"`
}

// endpoints are the plan's, once resolved (and, for nats, its server
// started).
func (p Plan) endpoints() Endpoints {
	return Endpoints{Scope: p.Scope, RingBytes: p.RingBytes, Nats: p.Nats}
}

// open opens a connector of transport as stage (the producer: none).
func (e Endpoints) open(transport, stage string) (connector.Receiver, error) {
	switch transport {
	case Nats:
		o := e.Nats
		o.StageID = connector.Stage(stage)
		c, err := natsconn.Open(o)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		return c, nil
	case Ring, PerKey:
		opts := connector.Options{StageID: connector.Stage(stage), WakeupScope: e.Scope, HostRingBytes: connector.NoRing}
		if transport == Ring {
			opts.HostRingBytes = e.RingBytes
		}
		c, err := connector.Open(opts)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("bench: transport %q has no connector", transport)
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
