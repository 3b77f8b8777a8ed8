package ring

import (
	"encoding/binary"
	"errors"
	"fmt"

	"omnishm/descriptor"
	"omnishm/proc"
)

// This file is the ring's pure core (SPEC §3): byte layout, frame
// validation, reclaim, placement and scan over a byte slice. It makes no
// system calls and builds everywhere; the file layer maps a ring and drives
// it under flock.

var (
	// ErrCorrupt is wrapped by every error about ring bytes that break
	// SPEC §3 (bad magic, bounds, frame sizes). A corrupt ring is never read
	// past.
	ErrCorrupt = errors.New("corrupt ring")
	// ErrNotInitialized is wrapped when a ring file's header is not written
	// yet: its producer is still creating it (the marker appears only
	// after, SPEC §2), or died doing so.
	ErrNotInitialized = errors.New("ring header not written yet")

	// The faults a corrupt ring is refused for, each wrapping ErrCorrupt,
	// so that tools can name what is wrong.
	ErrBadMagic         = fmt.Errorf("%w: bad magic", ErrCorrupt)              // not a ring header
	ErrCapacityMismatch = fmt.Errorf("%w: capacity mismatch", ErrCorrupt)      // capacity vs file size, or not 16-aligned
	ErrPositions        = fmt.Errorf("%w: head and tail disagree", ErrCorrupt) // tail after head, or more used than capacity
	ErrFrame            = fmt.Errorf("%w: bad frame", ErrCorrupt)              // a frame's size, bounds or key
)

// Kind is a frame's payload kind (SPEC §3).
type Kind uint8

const (
	// KindBytes is a serialized msgpack payload (SPEC §5).
	KindBytes Kind = 0
	// KindTensors is a tensor frame (SPEC §4).
	KindTensors Kind = 1
	// kindPadding fills the end of the buffer at a wrap; never a payload.
	kindPadding Kind = 2
)

// String names the kind as the protocol does.
func (k Kind) String() string {
	switch k {
	case KindBytes:
		return "bytes"
	case KindTensors:
		return "tensors"
	case kindPadding:
		return "padding"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// HeaderSize is the size of a ring file's header (SPEC §3): the data region
// of capacity bytes starts after it.
const HeaderSize = 64

const (
	frameHeaderSize = 16
	offCapacity     = 8
	offHead         = 16
	offTail         = 24
	offCreatorPID   = 32
	offCreatorStart = 40
	offState        = 9 // of a frame header
	stateReady      = 0
	stateDone       = 1
	maxKeyLen       = 65535
)

var magic = [8]byte{'O', 'M', 'S', 'H', 'M', 'R', '0', '1'}

func align16(n uint64) uint64 { return (n + 15) &^ 15 }

// Header is a ring file's 64-byte header (SPEC §3).
type Header struct {
	Capacity     uint64
	Head, Tail   uint64
	CreatorPID   uint64
	CreatorStart uint64 // field 22 of /proc/{pid}/stat when the ring was made
}

// Creator is the process that made the ring. A pid no process can have
// (beyond int32) gives an ID that proc.Check reports Dead.
func (h Header) Creator() proc.ID {
	return proc.ID{PID: int(min(h.CreatorPID, 1<<31)), Start: h.CreatorStart}
}

// FrameInfo describes one frame between tail and head, for tools.
type FrameInfo struct {
	Position   uint64
	Total      int
	PayloadLen int
	Kind       Kind
	Done       bool
	Key        string
}

func encodeHeader(b []byte, h Header) {
	copy(b[:8], magic[:])
	le := binary.LittleEndian
	le.PutUint64(b[offCapacity:], h.Capacity)
	le.PutUint64(b[offHead:], h.Head)
	le.PutUint64(b[offTail:], h.Tail)
	le.PutUint64(b[offCreatorPID:], h.CreatorPID)
	le.PutUint64(b[offCreatorStart:], h.CreatorStart)
	clear(b[48:HeaderSize])
}

// ReadHeader decodes the header at the start of b, the first HeaderSize
// bytes (or fewer, of a short file) of a ring file. It checks the magic
// only: the identity fields (capacity, creator) never change once written,
// while head and tail move under the ring lock, so read without it they are
// a snapshot that Parse and an attach check again. A header not written
// yet (zero so far, or an empty file) wraps ErrNotInitialized; anything
// else that is not a ring header wraps ErrCorrupt.
func ReadHeader(b []byte) (Header, error) {
	if unwritten(b[:min(len(b), len(magic))]) {
		return Header{}, ErrNotInitialized
	}
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, shorter than the header", ErrCorrupt, len(b))
	}
	if [8]byte(b[:8]) != magic {
		return Header{}, fmt.Errorf("%w %q", ErrBadMagic, b[:8])
	}
	le := binary.LittleEndian
	return Header{
		Capacity:     le.Uint64(b[offCapacity:]),
		Head:         le.Uint64(b[offHead:]),
		Tail:         le.Uint64(b[offTail:]),
		CreatorPID:   le.Uint64(b[offCreatorPID:]),
		CreatorStart: le.Uint64(b[offCreatorStart:]),
	}, nil
}

// unwritten: a producer sizes the file (zero-filled) before it writes the
// header, so a magic of zeros, or none yet, is a ring still being made.
func unwritten(magicBytes []byte) bool {
	for _, c := range magicBytes {
		if c != 0 {
			return false
		}
	}
	return true
}

// decodeHeader checks what every reader checks before trusting a ring
// (SPEC §7 attach): the magic, capacity == size - 64, tail <= head. It also
// refuses what would make frame arithmetic meaningless (a capacity that is
// zero or not 16-aligned, more used bytes than capacity); no valid producer
// writes those.
func decodeHeader(file []byte) (Header, error) {
	h, err := ReadHeader(file)
	if err != nil {
		return h, err
	}
	if err := h.check(uint64(len(file) - HeaderSize)); err != nil {
		return h, err
	}
	return h, nil
}

func (h Header) check(size uint64) error {
	switch {
	case h.Capacity != size:
		return fmt.Errorf("%w: capacity %d but %d data bytes", ErrCapacityMismatch, h.Capacity, size)
	case h.Capacity == 0 || h.Capacity%16 != 0:
		return fmt.Errorf("%w: capacity %d", ErrCapacityMismatch, h.Capacity)
	case h.Tail > h.Head:
		return fmt.Errorf("%w: tail %d after head %d", ErrPositions, h.Tail, h.Head)
	case h.Head-h.Tail > h.Capacity:
		return fmt.Errorf("%w: %d used bytes in a capacity of %d", ErrPositions, h.Head-h.Tail, h.Capacity)
	}
	return nil
}

// frame is a decoded 16-byte frame header.
type frame struct {
	total, payloadLen uint32
	kind              Kind
	state             uint8
	keyLen            uint16
}

// readFrame decodes and validates the frame at monotonic position pos of
// data (the ring's data region, len == capacity), exactly as the Python
// reader does: total >= 16, a multiple of 16, not crossing the end of the
// buffer, and key+payload within total unless it is padding.
func readFrame(data []byte, pos uint64) (frame, error) {
	capacity := uint64(len(data))
	if capacity < frameHeaderSize {
		return frame{}, fmt.Errorf("%w: capacity %d", ErrCapacityMismatch, capacity)
	}
	off := offsetIn(pos, capacity)
	if off+frameHeaderSize > capacity {
		return frame{}, fmt.Errorf("%w: frame header at %d crosses the end", ErrFrame, pos)
	}
	return decodeFrame(data[off:off+frameHeaderSize], pos, capacity)
}

// offsetIn is pos % capacity, the offset in the buffer of monotonic position
// pos: a mask for a power-of-two capacity (the default's, and a branch
// every call takes alike), whose 64-bit division a put+get pair would
// otherwise pay about ten times.
func offsetIn(pos, capacity uint64) uint64 {
	if capacity&(capacity-1) == 0 {
		return pos & (capacity - 1)
	}
	return pos % capacity
}

// decodeFrame decodes and validates the 16-byte frame header b of the frame
// at position pos of a ring of capacity bytes.
func decodeFrame(b []byte, pos, capacity uint64) (frame, error) {
	le := binary.LittleEndian
	f := frame{
		total:      le.Uint32(b[0:]),
		payloadLen: le.Uint32(b[4:]),
		kind:       Kind(b[8]),
		state:      b[offState],
		keyLen:     le.Uint16(b[10:]),
	}
	total := uint64(f.total)
	if total < frameHeaderSize || total%16 != 0 || offsetIn(pos, capacity)+total > capacity {
		return frame{}, fmt.Errorf("%w: frame at %d has size %d", ErrFrame, pos, f.total)
	}
	if f.kind != kindPadding && frameHeaderSize+uint64(f.payloadLen)+uint64(f.keyLen) > total {
		return frame{}, fmt.Errorf("%w: frame at %d: key %d + payload %d exceed size %d",
			ErrFrame, pos, f.keyLen, f.payloadLen, f.total)
	}
	return f, nil
}

// claimed decides whether the publication of size payload bytes at
// position pos is claimed, from the ring's tail and the frame header b read
// at pos (before tail was): done, or reclaimed (tail past it). A frame that
// is not that publication wraps descriptor.ErrBad: the descriptor names
// none.
func claimed(h Header, tail, pos uint64, size int, b []byte) (bool, error) {
	if tail > pos {
		return true, nil
	}
	if pos >= h.Head {
		return false, fmt.Errorf("%w: no frame at position %d (head %d)", descriptor.ErrBad, pos, h.Head)
	}
	if h.Capacity == 0 || len(b) < frameHeaderSize {
		return false, fmt.Errorf("%w: capacity %d, %d frame header bytes", ErrCapacityMismatch, h.Capacity, len(b))
	}
	f, err := decodeFrame(b, pos, h.Capacity)
	if err != nil {
		return false, err
	}
	if f.kind == kindPadding || int(f.payloadLen) != size {
		return false, fmt.Errorf("%w: the frame at %d holds %d bytes of %v, not %d", descriptor.ErrBad, pos, f.payloadLen, f.kind, size)
	}
	return f.state == stateDone, nil
}

func writeFrame(data []byte, pos uint64, f frame) {
	b := data[offsetIn(pos, uint64(len(data))):]
	le := binary.LittleEndian
	le.PutUint32(b[0:], f.total)
	le.PutUint32(b[4:], f.payloadLen)
	b[8] = byte(f.kind)
	b[offState] = f.state
	le.PutUint16(b[10:], f.keyLen)
	le.PutUint32(b[12:], 0)
}

// frameKey and framePayload return views of a frame validated by readFrame.
func frameKey(data []byte, pos uint64, f frame) []byte {
	start := offsetIn(pos, uint64(len(data))) + frameHeaderSize
	return data[start : start+uint64(f.keyLen)]
}

func framePayload(data []byte, pos uint64, f frame) []byte {
	start := offsetIn(pos, uint64(len(data))) + frameHeaderSize + uint64(f.keyLen)
	return data[start : start+uint64(f.payloadLen) : start+uint64(f.payloadLen)]
}

// markDone retires a frame: the one-byte state write of SPEC §3.
func markDone(data []byte, pos uint64) {
	data[offsetIn(pos, uint64(len(data)))+offState] = stateDone
}

// frameTotal is the ring footprint of a frame, 0 if it can never fit.
func frameTotal(keyLen, payloadLen int) uint64 {
	if keyLen < 0 || payloadLen < 0 || keyLen > maxKeyLen || payloadLen > 1<<32-64 {
		return 0
	}
	return align16(frameHeaderSize + uint64(keyLen) + uint64(payloadLen))
}

// reclaim returns the new tail after advancing over done and padding frames
// (SPEC §3 put): only the producer calls it, under the ring lock.
func reclaim(data []byte, head, tail uint64) (uint64, error) {
	if tail > head || head-tail > uint64(len(data)) {
		return tail, fmt.Errorf("%w: head %d, tail %d, capacity %d", ErrPositions, head, tail, len(data))
	}
	for tail < head {
		f, err := readFrame(data, tail)
		if err != nil {
			return tail, err
		}
		if uint64(f.total) > head-tail {
			return tail, fmt.Errorf("%w: frame at %d ends after head %d", ErrFrame, tail, head)
		}
		if f.kind != kindPadding && f.state != stateDone {
			break
		}
		tail += uint64(f.total)
	}
	return tail, nil
}

// place decides where a frame of total bytes goes when the ring holds
// [tail, head): at head, or after a padding frame that fills the buffer's
// end (a frame never wraps). ok is false when padding + total exceeds the
// free space: the caller refuses the put and nothing waits (SPEC §3).
func place(capacity, head, tail, total uint64) (padding uint64, ok bool) {
	off := offsetIn(head, capacity)
	if off+total > capacity {
		padding = capacity - off
	}
	if padding+total > capacity-(head-tail) {
		return 0, false
	}
	return padding, true
}

// index maps the keys of ready frames seen by a scan (a producer's: put) to
// their positions. positions keeps scan order so entries reclaimed by the
// producer (or overwritten after a wrap) are dropped once they fall behind
// tail.
//
// While positions holds at most smallIndex entries (one or two frames in
// flight: the usual case) a key is found by comparing the entries, newest
// first, each marked current or not: cheaper than the map, whose hashing a
// put paid four times (its key's look-up and add, the prune's look-up and
// delete of the frame it reclaimed). Past smallIndex entries byKey holds
// each key's current entry, until positions empties.
type index struct {
	cursor    uint64
	frames    uint64            // payload frames the cursor passed, ready or not
	byKey     map[string]uint64 // the current entries, while mapped
	mapped    bool
	positions []keyAt // FIFO; consumed from first
	first     int
}

// smallIndex is the most entries an index holds without mapping its keys.
const smallIndex = 8

type keyAt struct {
	pos     uint64
	key     string
	current bool // the key's entry in lookup (unmapped only)
}

// lookup returns the position of key's current entry.
func (ix *index) lookup(key string) (uint64, bool) {
	if ix.mapped {
		pos, ok := ix.byKey[key]
		return pos, ok
	}
	if i := ix.find(key); i >= 0 {
		return ix.positions[i].pos, true
	}
	return 0, false
}

// find is the slot of key's current entry in positions, -1 if none; the
// index is not mapped.
func (ix *index) find(key string) int {
	for i := len(ix.positions) - 1; i >= ix.first; i-- {
		if e := &ix.positions[i]; e.current && e.key == key {
			return i
		}
	}
	return -1
}

// forget drops key's current entry (its frame was taken or retired).
func (ix *index) forget(key string) {
	if ix.mapped {
		delete(ix.byKey, key)
	} else if i := ix.find(key); i >= 0 {
		ix.positions[i].current = false
	}
}

// empty reports whether no key has a current entry.
func (ix *index) empty() bool {
	if ix.mapped {
		return len(ix.byKey) == 0
	}
	for _, e := range ix.positions[ix.first:] {
		if e.current {
			return false
		}
	}
	return true
}

// each calls f on every current entry, in no particular order, until f
// returns false; f may forget the key it is given.
func (ix *index) each(f func(key string, pos uint64) bool) {
	if ix.mapped {
		for k, pos := range ix.byKey {
			if !f(k, pos) {
				return
			}
		}
		return
	}
	for i := ix.first; i < len(ix.positions); i++ {
		if e := ix.positions[i]; e.current && !f(e.key, e.pos) {
			return
		}
	}
}

// add makes pos key's current entry.
func (ix *index) add(key string, pos uint64) {
	if ix.first > 0 && ix.first == len(ix.positions) {
		// Empty: so is byKey (each of its entries has one in positions);
		// cleared anyway if not (the check: a clear of a table that once
		// grew walks it all), so that no entry outlives its position.
		ix.positions, ix.first, ix.mapped = ix.positions[:0], 0, false
		if len(ix.byKey) != 0 {
			clear(ix.byKey)
		}
	} else if ix.first > 64 && ix.first*2 > len(ix.positions) {
		n := copy(ix.positions, ix.positions[ix.first:])
		clear(ix.positions[n:])
		ix.positions, ix.first = ix.positions[:n], 0
	}
	if !ix.mapped && len(ix.positions)-ix.first >= smallIndex {
		ix.mapKeys()
	}
	if ix.mapped {
		ix.byKey[key] = pos
		ix.positions = append(ix.positions, keyAt{pos: pos, key: key})
		return
	}
	if i := ix.find(key); i >= 0 {
		ix.positions[i].current = false
	}
	ix.positions = append(ix.positions, keyAt{pos: pos, key: key, current: true})
}

// mapKeys moves the current entries into byKey.
func (ix *index) mapKeys() {
	if ix.byKey == nil {
		ix.byKey = make(map[string]uint64)
	}
	for _, e := range ix.positions[ix.first:] {
		if e.current {
			ix.byKey[e.key] = e.pos
		}
	}
	ix.mapped = true
}

// since returns the index's entries at positions from pos on, in ring
// order (stale ones included: the caller checks lookup). The slice aliases
// the index: use it before the next scan.
func (ix *index) since(pos uint64) []keyAt {
	i := len(ix.positions)
	for i > ix.first && ix.positions[i-1].pos >= pos {
		i--
	}
	return ix.positions[i:]
}

// indexedSince reports whether the index has an entry at pos or later.
func (ix *index) indexedSince(pos uint64) bool {
	n := len(ix.positions)
	return n > ix.first && ix.positions[n-1].pos >= pos
}

// prune forgets positions before tail: those frames were reclaimed.
func (ix *index) prune(tail uint64) {
	for ix.first < len(ix.positions) && ix.positions[ix.first].pos < tail {
		if e := ix.positions[ix.first]; ix.mapped {
			if p, ok := ix.byKey[e.key]; ok && p == e.pos {
				delete(ix.byKey, e.key)
			}
		}
		ix.positions[ix.first] = keyAt{}
		ix.first++
	}
}

// scan indexes the ready frames in [max(cursor, tail), head) by key and
// prunes what fell behind tail (SPEC §3 get). On a corrupt frame the cursor
// stays before it and the error wraps ErrCorrupt.
func (ix *index) scan(data []byte, head, tail uint64) error {
	_, _, _, err := ix.scanFor(data, head, tail, "")
	return err
}

// scanFor is scan for a get of key want (none when ""): the newest ready
// frame of want it passes is not indexed but returned (found) with its
// header, so a get that claims it at once neither copies its key, nor
// touches the map, nor reads the header again.
func (ix *index) scanFor(data []byte, head, tail uint64, want string) (pos uint64, wanted frame, found bool, err error) {
	if tail > head || head-tail > uint64(len(data)) {
		return 0, wanted, false, fmt.Errorf("%w: head %d, tail %d, capacity %d", ErrPositions, head, tail, len(data))
	}
	ix.cursor = max(ix.cursor, tail)
	for ix.cursor < head {
		at := ix.cursor
		f, err := readFrame(data, at)
		if err != nil {
			return pos, wanted, found, err
		}
		if uint64(f.total) > head-at { // not at+total: that may overflow
			return pos, wanted, found, fmt.Errorf("%w: frame at %d ends after head %d", ErrFrame, at, head)
		}
		ix.cursor += uint64(f.total)
		if f.kind != kindPadding {
			ix.frames++
		}
		if f.kind != kindPadding && f.state == stateReady {
			k := frameKey(data, at, f)
			if want != "" && string(k) == want { // compared without a copy
				pos, wanted, found = at, f, true // the newest wins, as in add
				continue
			}
			// Positions only grow: no frame from the cursor on is indexed.
			ix.add(string(k), at)
		}
	}
	if found {
		ix.forget(want) // an entry of an older scan: superseded
	}
	ix.prune(tail)
	return pos, wanted, found, nil
}

// Parse reads a whole ring file (header + data) and lists the frames from
// tail to head, for tools and tests. It never takes a lock: the caller
// gives a consistent copy. Errors wrap ErrCorrupt (the frames read before a
// corrupt one are returned with it), or ErrNotInitialized for a header not
// written yet.
func Parse(file []byte) (Header, []FrameInfo, error) {
	h, err := decodeHeader(file)
	if err != nil {
		return h, nil, err
	}
	data := file[HeaderSize:]
	var frames []FrameInfo
	for pos := h.Tail; pos < h.Head; {
		f, err := readFrame(data, pos)
		if err != nil {
			return h, frames, err
		}
		if uint64(f.total) > h.Head-pos {
			return h, frames, fmt.Errorf("%w: frame at %d ends after head %d", ErrFrame, pos, h.Head)
		}
		info := FrameInfo{Position: pos, Total: int(f.total), Kind: f.kind, Done: f.state == stateDone}
		if f.kind != kindPadding {
			info.PayloadLen = int(f.payloadLen)
			info.Key = string(frameKey(data, pos, f))
		}
		frames = append(frames, info)
		pos += uint64(f.total)
	}
	return h, frames, nil
}
