//go:build linux

package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Some builds of the Python side put a 20-byte header in front of a
// segment's bytes (SPEC §6): magic, big-endian u64 payload length,
// big-endian u32 CRC-32 (IEEE) of the payload.
const (
	wrapMagic  = "OMNIIPC1"
	wrapHeader = 20
)

// ErrCorrupt is wrapped by Claim's error for a segment whose OMNIIPC1
// header does not match its payload, or that ends before its size. That
// error already says "segment: claim:" and names the file, so this one
// says only what is wrong.
var ErrCorrupt = errors.New("corrupt segment")

// unwrap returns the payload inside raw: raw itself in the plain form, or
// the checked body of the OMNIIPC1 form. Plain serialized bytes (SPEC §5)
// never start with the magic: msgpack's 'O' is a complete one-byte value.
// The result aliases raw.
func unwrap(raw []byte) ([]byte, error) {
	if len(raw) < len(wrapMagic) || string(raw[:len(wrapMagic)]) != wrapMagic {
		return raw, nil
	}
	if len(raw) < wrapHeader {
		return nil, fmt.Errorf("%w: %d bytes, the OMNIIPC1 header needs %d", ErrCorrupt, len(raw), wrapHeader)
	}
	size := binary.BigEndian.Uint64(raw[8:16])
	want := binary.BigEndian.Uint32(raw[16:20])
	body := raw[wrapHeader:]
	if size != uint64(len(body)) {
		return nil, fmt.Errorf("%w: OMNIIPC1 header says %d payload bytes, segment holds %d", ErrCorrupt, size, len(body))
	}
	if got := crc32.ChecksumIEEE(body); got != want {
		return nil, fmt.Errorf("%w: CRC-32 %#08x, OMNIIPC1 header says %#08x", ErrCorrupt, got, want)
	}
	return body, nil
}
