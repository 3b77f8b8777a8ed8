//go:build linux

package stream

import (
	"context"
	"errors"
	"sync"
	"time"

	"omnishm/connector"
	"omnishm/keys"
)

// memTransport is an in-memory connector.Receiver: one map of unclaimed
// publications, claims that remove them, and a broadcast on every put.
type memTransport struct {
	mu      sync.Mutex
	items   map[string]any
	arrived chan struct{} // closed and replaced on every put
	calls   []string      // "put KEY", "cleanup_prefix PREFIX", in order
	putErr  error
}

func newMem() *memTransport {
	return &memTransport{items: map[string]any{}, arrived: make(chan struct{})}
}

func (m *memTransport) Put(from, to, key string, payload any) (int, connector.Descriptor, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, "put "+key)
	if m.putErr != nil {
		return 0, connector.Descriptor{}, m.putErr
	}
	m.items[key] = payload
	close(m.arrived)
	m.arrived = make(chan struct{})
	return 1, connector.Descriptor{Shm: &connector.ShmHandle{Name: key, Size: 1}, Size: 1}, nil
}

func (m *memTransport) Get(from, to, key string, desc *connector.Descriptor) (any, int, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.items[key]
	if !ok {
		return nil, 0, false, nil
	}
	delete(m.items, key)
	return p, 1, true, nil
}

func (m *memTransport) GetWithDeadline(from, to, key string, desc *connector.Descriptor, _ time.Time) (any, int, bool, error) {
	return m.Get(from, to, key, desc)
}

func (m *memTransport) GetContext(_ context.Context, from, to, key string, desc *connector.Descriptor) (any, int, bool, error) {
	return m.Get(from, to, key, desc)
}

// Stage is the receiving end of the edge the tests use, 0->1.
func (m *memTransport) Stage() connector.Stage { return "1" }

func (m *memTransport) Recv(ctx context.Context, from, key string) (any, int, error) {
	for {
		m.mu.Lock()
		p, ok := m.items[key]
		if ok {
			delete(m.items, key)
		}
		arrived := m.arrived
		m.mu.Unlock()
		if ok {
			return p, 1, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-arrived:
		}
	}
}

func (m *memTransport) Cleanup(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.items[key]
	delete(m.items, key)
	return ok
}

// CleanupPrefix follows SPEC §9: the prefix followed by decimal digits only.
func (m *memTransport) CleanupPrefix(prefix string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, "cleanup_prefix "+prefix)
	n := 0
	for k := range m.items {
		if keys.InPrefix(prefix, k) {
			delete(m.items, k)
			n++
		}
	}
	return n
}

func (m *memTransport) Health() connector.Health { return connector.Health{} }
func (m *memTransport) Close() error             { return nil }

func (m *memTransport) has(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.items[key]
	return ok
}

func (m *memTransport) log() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...)
}

var _ connector.Receiver = (*memTransport)(nil)

// pollOnly hides Recv, so a Reader must poll.
type pollOnly struct{ connector.Transport }

// gatedTransport holds every Put until the test lets it through: each value
// sent on gate admits one Put. started receives the key of each Put that
// has begun waiting.
type gatedTransport struct {
	connector.Transport
	gate    chan struct{}
	started chan string
}

func newGated(inner connector.Transport) *gatedTransport {
	return &gatedTransport{Transport: inner, gate: make(chan struct{}), started: make(chan string, 1024)}
}

func (g *gatedTransport) Put(from, to, key string, payload any) (int, connector.Descriptor, error) {
	g.started <- key
	<-g.gate
	return g.Transport.Put(from, to, key, payload)
}

var errBoom = errors.New("boom")
