package shmstate

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// SPEC §3 ring layout.
const (
	ringHeaderSize  = 64
	frameHeaderSize = 16
	frameStateAt    = 9
	kindPadding     = 2
	stateReady      = 0
	stateDone       = 1
	ringMagic       = "OMSHMR01"
	// maxReadyKeys bounds how many ready keys a summary keeps: a view, not a dump.
	maxReadyKeys = 8
)

// ErrCorrupt is returned for ring bytes that do not follow SPEC §3.
var ErrCorrupt = errors.New("shmstate: corrupt ring")

// ringHeader is the fixed 64-byte ring header.
type ringHeader struct {
	capacity, head, tail     uint64
	creatorPID, creatorStart uint64
}

// parseRingHeader reads and checks the header of a whole ring file.
func parseRingHeader(b []byte) (ringHeader, error) {
	if len(b) < ringHeaderSize {
		return ringHeader{}, fmt.Errorf("%w: %d bytes, shorter than the header", ErrCorrupt, len(b))
	}
	if string(b[:8]) != ringMagic {
		return ringHeader{}, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:8])
	}
	le := binary.LittleEndian
	h := ringHeader{
		capacity:     le.Uint64(b[8:]),
		head:         le.Uint64(b[16:]),
		tail:         le.Uint64(b[24:]),
		creatorPID:   le.Uint64(b[32:]),
		creatorStart: le.Uint64(b[40:]),
	}
	if h.capacity != uint64(len(b)-ringHeaderSize) || h.capacity == 0 {
		return h, fmt.Errorf("%w: capacity %d for a %d-byte file", ErrCorrupt, h.capacity, len(b))
	}
	if h.tail > h.head || h.head-h.tail > h.capacity {
		return h, fmt.Errorf("%w: tail %d, head %d, capacity %d", ErrCorrupt, h.tail, h.head, h.capacity)
	}
	return h, nil
}

// ringCounts is what a ring's live window holds.
type ringCounts struct {
	ready, done int
	readyKeys   []string // the first maxReadyKeys, in position order
}

// countFrames walks the live window [tail, head) of a whole ring file,
// checking every frame against the buffer as a receiver's scan does.
func countFrames(b []byte, h ringHeader) (ringCounts, error) {
	var c ringCounts
	le := binary.LittleEndian
	for pos := h.tail; pos < h.head; {
		off := pos % h.capacity
		if off+frameHeaderSize > h.capacity {
			return c, fmt.Errorf("%w: frame header at %d crosses the end", ErrCorrupt, pos)
		}
		f := b[ringHeaderSize+off:]
		total := uint64(le.Uint32(f[0:]))
		payloadLen := uint64(le.Uint32(f[4:]))
		kind, state := f[8], f[frameStateAt]
		keyLen := uint64(le.Uint16(f[10:]))
		if total < frameHeaderSize || total%16 != 0 || off+total > h.capacity || total > h.head-pos {
			return c, fmt.Errorf("%w: frame at %d has size %d", ErrCorrupt, pos, total)
		}
		pos += total
		if kind == kindPadding {
			continue
		}
		if frameHeaderSize+keyLen+payloadLen > total {
			return c, fmt.Errorf("%w: frame at %d overruns its size", ErrCorrupt, pos-total)
		}
		switch state {
		case stateReady:
			c.ready++
			if len(c.readyKeys) < maxReadyKeys {
				c.readyKeys = append(c.readyKeys, string(f[frameHeaderSize:frameHeaderSize+keyLen]))
			}
		default:
			c.done++
		}
	}
	return c, nil
}
