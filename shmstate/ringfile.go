package shmstate

import (
	"encoding/binary"

	"omnishm/ring"
)

// SPEC §3 header fields this package reads without the ring lock: they are
// written once, before the marker appears, and never change.
const (
	ringHeaderSize = 64
	ringMagic      = "OMSHMR01"
	// maxReadyKeys bounds how many ready keys a summary keeps: a view, not a dump.
	maxReadyKeys = 8
)

// ringIdentity is the immutable part of a ring header.
type ringIdentity struct {
	capacity, creatorPID, creatorStart uint64
}

// peekHeader reads a ring header's immutable fields; ok is false while the
// header is not written yet (all zero) or for a file that is not a ring.
func peekHeader(b []byte) (id ringIdentity, ok bool) {
	if len(b) < ringHeaderSize || string(b[:8]) != ringMagic {
		return id, false
	}
	le := binary.LittleEndian
	return ringIdentity{capacity: le.Uint64(b[8:]), creatorPID: le.Uint64(b[32:]), creatorStart: le.Uint64(b[40:])}, true
}

// ringCounts is what a ring's live window holds.
type ringCounts struct {
	ready, done int
	readyKeys   []string // the first maxReadyKeys, in position order
}

// countFrames summarises the frames ring.Parse listed from tail to head;
// padding frames are neither ready nor done payloads.
func countFrames(frames []ring.FrameInfo) ringCounts {
	c := ringCounts{readyKeys: []string{}}
	for _, f := range frames {
		switch {
		case f.Kind != ring.KindBytes && f.Kind != ring.KindTensors: // padding
		case f.Done:
			c.done++
		default:
			c.ready++
			if len(c.readyKeys) < maxReadyKeys {
				c.readyKeys = append(c.readyKeys, f.Key)
			}
		}
	}
	return c
}
