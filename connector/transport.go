//go:build linux

package connector

import (
	"context"
	"errors"
	"time"

	"omnishm/descriptor"
	"omnishm/keys"
	"omnishm/proc"
)

// Transport is what a stage uses to move payloads between stages. Every
// connector implements it. Arguments come in one order across the API: the
// context where there is one, the edge (from, to), the key, the optional
// descriptor.
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
	// It is idempotent and returns every error it met, joined.
	Close() error
}

// Receiver is a Transport that belongs to one stage and can block until a
// payload for it arrives. New returns one, so a stage built from its
// configuration receives without a type assertion.
type Receiver interface {
	Transport
	// Stage is the stage this endpoint receives as: Recv reads the edges
	// from->Stage(). NoStage for an endpoint that only puts.
	Stage() Stage
	// Recv blocks until key arrives on edge from->Stage(), ctx ends, or an
	// error occurs. It returns an error wrapping ctx.Err() when ctx ends
	// first (SHM's and natsconn's say what they saw: RecvTimeoutError), and an
	// error wrapping ErrBadStage at once when the endpoint has no stage. The
	// payload is owned by the caller.
	Recv(ctx context.Context, from, key string) (payload any, size int, err error)
}

// Message is one publication as a receiver got it.
type Message struct {
	// Payload is the caller's: nothing in it aliases shared memory.
	Payload any
	// Size is the payload's size in bytes on the wire.
	Size int
	// Producer is the process that published it, where the path knows it:
	// the creator of the ring it was read from (SPEC §3). It is zero for a
	// per-key segment, which records no producer (SPEC §6).
	Producer proc.ID
}

// MessageReceiver is a Receiver that also says who published what it
// returns, so a caller can follow that producer's liveness (package proc).
// SHM is one.
type MessageReceiver interface {
	Receiver
	// GetMessage is Get returning a Message.
	GetMessage(from, to, key string, desc *Descriptor) (msg Message, ok bool, err error)
	// RecvMessage is Recv returning a Message.
	RecvMessage(ctx context.Context, from, key string) (Message, error)
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

// The errors callers branch on, with errors.Is. A miss is not an error.
var (
	// ErrClosed is returned by operations on a closed connector, and by a
	// Put that Close overtook (it published nothing).
	ErrClosed = errors.New("connector: closed")
	// ErrUnknownConnector is returned by New for a configuration name no
	// connector is registered under.
	ErrUnknownConnector = errors.New("connector: unknown connector name")
	// ErrBadStage is wrapped by every error about a stage id: a malformed
	// Options.StageID (refused by Open), a Recv on an endpoint without a
	// stage, an empty stage id in an edge of Put, Get or Recv.
	ErrBadStage = errors.New("bad stage id")
	// ErrBadKey is wrapped by every error about a key that cannot name a
	// publication (SPEC §1); nothing was touched. It is keys.ErrBadKey.
	ErrBadKey = keys.ErrBadKey
	// ErrBadDescriptor is wrapped by every error about a descriptor that
	// names no publication of this protocol. It is descriptor.ErrBad.
	ErrBadDescriptor = descriptor.ErrBad
)

// Descriptor, ShmHandle and RingHandle are the descriptor package's types,
// named here so a stage needs one import: a connector returns and accepts
// exactly these.
type (
	Descriptor = descriptor.Descriptor
	ShmHandle  = descriptor.ShmHandle
	RingHandle = descriptor.RingHandle
	NatsHandle = descriptor.NatsHandle
)
