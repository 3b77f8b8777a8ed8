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

// Descriptor names one publication: {"shm": {"name", "size"}, "size"} for a
// per-key segment or {"host_ring": {"name", "position", "size"}, "size"}
// for a ring frame. Exactly one handle is set; Size is the payload length.
type Descriptor struct {
	Shm      *ShmHandle  `json:"shm,omitempty" msgpack:"shm,omitempty"`
	HostRing *RingHandle `json:"host_ring,omitempty" msgpack:"host_ring,omitempty"`
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
	if inner, ok := probe[key]; ok && key != "shm" && key != "host_ring" && key != "size" {
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
	switch {
	case (d.Shm == nil) == (d.HostRing == nil):
		return fmt.Errorf("%w: want exactly one of shm, host_ring", ErrBad)
	case d.Size < 0:
		return fmt.Errorf("%w: negative size", ErrBad)
	case d.Shm != nil && (d.Shm.Name == "" || d.Shm.Size < 0):
		return fmt.Errorf("%w: shm handle without a name", ErrBad)
	case d.HostRing != nil && (d.HostRing.Name == "" || d.HostRing.Size < 0):
		return fmt.Errorf("%w: host_ring handle without a name", ErrBad)
	}
	return nil
}

// String is the descriptor's JSON form.
func (d Descriptor) String() string {
	b, _ := json.Marshal(d)
	return string(b)
}
