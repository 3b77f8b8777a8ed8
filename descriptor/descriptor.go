// Package descriptor owns the one descriptor type of every transport: the
// name of one publication, in the shape both implementations put on the
// wire (SPEC §3, §6, §9). The ring fills its HostRing handle, per-key
// segments their Shm handle; a receiver that passes a descriptor back gets
// that publication or a miss, never a newer one. It is pure data.
package descriptor

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Descriptor names one publication, in the shape its transport puts on the
// wire: {"shm": {"name", "size"}, "size"} for a per-key segment,
// {"host_ring": {"name", "position", "size"}, "size"} for a ring frame, or
// {"nats": {"bucket", "key", "revision", "size"}, "size"} for an entry of a
// NATS JetStream bucket (package natsconn).
type Descriptor struct {
	Shm      *ShmHandle  `json:"shm,omitempty" msgpack:"shm,omitempty"`
	HostRing *RingHandle `json:"host_ring,omitempty" msgpack:"host_ring,omitempty"`
	Nats     *NatsHandle `json:"nats,omitempty" msgpack:"nats,omitempty"`
	Size     int         `json:"size" msgpack:"size"`
}

// ShmHandle is the per-key segment part of a Descriptor.
type ShmHandle struct {
	Name string `json:"name" msgpack:"name"`
	Size int    `json:"size" msgpack:"size"`
}

// RingHandle is the host-ring part of a Descriptor. Position is the frame's
// monotonic byte position, so an old descriptor never matches a newer frame.
type RingHandle struct {
	Name     string `json:"name" msgpack:"name"`
	Position uint64 `json:"position" msgpack:"position"`
	Size     int    `json:"size" msgpack:"size"`
}

// NatsHandle is the NATS JetStream part of a Descriptor: the key-value entry
// holding the publication. Revision is the entry's revision (its stream
// sequence), which only grows, so an old descriptor never matches a newer
// publication of the key. Object names the object-store object that holds
// the bytes of a payload above the server's maximum message size; it is
// empty when the entry holds them itself.
type NatsHandle struct {
	Bucket   string `json:"bucket" msgpack:"bucket"`
	Key      string `json:"key" msgpack:"key"`
	Revision uint64 `json:"revision" msgpack:"revision"`
	Size     int    `json:"size" msgpack:"size"`
	Object   string `json:"object,omitempty" msgpack:"object,omitempty"`
}

// ErrBad is wrapped by every error about a descriptor that names no
// publication.
var ErrBad = errors.New("bad descriptor")

// Parse reads a descriptor from JSON, in either the plain form or
// the {key: descriptor} map form of SPEC §9, picking key's entry from a map.
func Parse(data []byte, key string) (*Descriptor, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBad, err)
	}
	if inner, ok := probe[key]; ok && key != "shm" && key != "host_ring" && key != "nats" && key != "size" {
		data = inner
	}
	var d Descriptor
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBad, err)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// From converts a descriptor that arrived as a decoded payload
// (map[string]any from msgpack or JSON), plain or in {key: descriptor} form.
func From(v any, key string) (*Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBad, err)
	}
	return Parse(data, key)
}

// Validate checks that exactly one handle is present and sizes are sane.
func (d *Descriptor) Validate() error {
	handles := 0
	for _, present := range []bool{d.Shm != nil, d.HostRing != nil, d.Nats != nil} {
		if present {
			handles++
		}
	}
	switch {
	case handles != 1:
		return fmt.Errorf("%w: want exactly one of shm, host_ring, nats", ErrBad)
	case d.Size < 0:
		return fmt.Errorf("%w: negative size", ErrBad)
	case d.Shm != nil && (d.Shm.Name == "" || d.Shm.Size < 0):
		return fmt.Errorf("%w: shm handle without a name", ErrBad)
	case d.HostRing != nil && (d.HostRing.Name == "" || d.HostRing.Size < 0):
		return fmt.Errorf("%w: host_ring handle without a name", ErrBad)
	case d.Nats != nil && (d.Nats.Bucket == "" || d.Nats.Key == "" || d.Nats.Revision == 0 || d.Nats.Size < 0):
		return fmt.Errorf("%w: nats handle without a bucket, key or revision", ErrBad)
	}
	return nil
}

// String is the descriptor's JSON form.
func (d Descriptor) String() string {
	b, _ := json.Marshal(d)
	return string(b)
}
