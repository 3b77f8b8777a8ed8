// Package connector composes the codecs, the host ring, the per-key segments
// and the wakeup FIFOs into the one object a stage uses to move payloads
// along its edges (SPEC §9).
package connector

import (
	"context"
	"errors"
	"time"
)

// Transport is what a stage uses to move payloads between stages. Every
// connector implements it; the shared-memory one also offers blocking
// receives (see SHM.Recv).
type Transport interface {
	// Put publishes payload under key on edge from->to. The payload is copied
	// before Put returns, so the caller may reuse its buffers at once.
	Put(from, to, key string, payload any) (size int, desc Descriptor, err error)
	// Get claims the publication of key. desc, when not nil, names one
	// publication: only that one may be returned. A miss is ok=false with a
	// nil error. The payload is owned by the caller.
	Get(from, to, key string, desc *Descriptor) (payload any, size int, ok bool, err error)
	// GetWithDeadline is Get that returns a miss once deadline has passed and
	// never waits on a lock held by another process.
	GetWithDeadline(from, to, key string, desc *Descriptor, deadline time.Time) (payload any, size int, ok bool, err error)
	// GetContext is GetWithDeadline for a context: a done ctx is a miss.
	GetContext(ctx context.Context, from, to, key string, desc *Descriptor) (payload any, size int, ok bool, err error)
	// Cleanup retires key on every path and reports whether anything was retired.
	Cleanup(key string) bool
	// CleanupPrefix retires the keys prefix+decimal digits and returns how many.
	CleanupPrefix(prefix string) int
	// Health returns the counters of SPEC §9.
	Health() Health
	// Close retires what this connector published and releases its resources.
	// It is idempotent.
	Close() error
}

// Receiver is a Transport whose receives can sleep until a producer wakes
// them instead of polling.
type Receiver interface {
	Transport
	// Recv blocks until key arrives on edge from->(this stage), ctx ends, or
	// an error occurs. It returns ctx.Err() when ctx ends first.
	Recv(ctx context.Context, from, key string) (payload any, size int, err error)
}

// Health is a snapshot of a connector's counters: SPEC §9's six, then those
// of a remote transport (package natsconn), zero and left out of the JSON
// form for the shared-memory connector.
type Health struct {
	Puts              uint64 `json:"puts"`
	Gets              uint64 `json:"gets"`
	BytesTransferred  uint64 `json:"bytes_transferred"`
	HostRingPuts      uint64 `json:"host_ring_puts"`
	HostRingGets      uint64 `json:"host_ring_gets"`
	HostRingFallbacks uint64 `json:"host_ring_fallbacks"`

	// RemoteObjectPuts and RemoteObjectGets count the payloads that went
	// through the server's object store, being above its maximum message size.
	RemoteObjectPuts uint64 `json:"remote_object_puts,omitempty"`
	RemoteObjectGets uint64 `json:"remote_object_gets,omitempty"`
	// RemoteClaimsLost counts claims that found the publication already
	// taken by another receiver, or replaced, and so missed.
	RemoteClaimsLost uint64 `json:"remote_claims_lost,omitempty"`
	// RemoteReconnects counts the times the client reconnected to the server.
	RemoteReconnects uint64 `json:"remote_reconnects,omitempty"`
}

// ErrClosed is returned by operations on a closed connector.
var ErrClosed = errors.New("connector: closed")

// ErrUnknownConnector is returned by New for a configuration name no
// connector is registered under.
var ErrUnknownConnector = errors.New("connector: unknown connector name")
