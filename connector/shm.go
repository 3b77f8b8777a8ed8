package connector

import (
	"context"
	"errors"
	"time"
)

// SHM is the shared-memory connector: vLLM-Omni's SharedMemoryConnector in
// Go. It is safe for concurrent use by many goroutines.
type SHM struct {
	opts Options
}

var errTodo = errors.New("connector: not implemented yet")

// Open returns a shared-memory connector. Nothing is allocated until the
// first put of an edge.
func Open(opts Options) (*SHM, error) { return &SHM{opts: opts}, nil }

// Put implements Transport.
func (c *SHM) Put(from, to, key string, payload any) (int, Descriptor, error) {
	return 0, Descriptor{}, errTodo
}

// Get implements Transport.
func (c *SHM) Get(from, to, key string, desc *Descriptor) (any, int, bool, error) {
	return nil, 0, false, errTodo
}

// GetWithDeadline implements Transport.
func (c *SHM) GetWithDeadline(from, to, key string, desc *Descriptor, deadline time.Time) (any, int, bool, error) {
	return nil, 0, false, errTodo
}

// Recv implements Receiver.
func (c *SHM) Recv(ctx context.Context, from, key string) (any, int, error) {
	return nil, 0, errTodo
}

// Cleanup implements Transport.
func (c *SHM) Cleanup(key string) bool { return false }

// CleanupPrefix implements Transport.
func (c *SHM) CleanupPrefix(prefix string) int { return 0 }

// Health implements Transport.
func (c *SHM) Health() Health { return Health{} }

// Close implements Transport.
func (c *SHM) Close() error { return nil }

var _ Receiver = (*SHM)(nil)
