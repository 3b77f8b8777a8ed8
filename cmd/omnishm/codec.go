package main

import (
	"encoding/binary"
	"errors"
	"fmt"

	"omnishm/frame"
	"omnishm/wire"
)

// The byte forms a payload travels in.
const (
	formMsgpack = "msgpack" // serialized bytes, SPEC §5 (payload kind 0)
	formFrame   = "frame"   // tensor frame, SPEC §4 (payload kind 1)
	formAuto    = "auto"    // decode only: tell the two apart (looksLikeFrame)
)

var errForm = errors.New("unknown form")

// encodePayload returns v's bytes in the given form. As SPEC §4 says, a
// payload without tensors has no frame form: asked for a frame, it gets the
// plain msgpack form.
func encodePayload(v any, form string) ([]byte, error) {
	switch form {
	case formMsgpack:
		return wire.Marshal(v)
	case formFrame:
		p, err := frame.Prepare(v, 0) // 0: no limit
		if err != nil {
			return nil, err
		}
		b := make([]byte, p.Size())
		if err := p.Write(b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w %q", errForm, form)
}

// decodePayload reads b in the given form; formAuto picks the form with
// looksLikeFrame.
func decodePayload(b []byte, form string) (any, error) {
	if form == formAuto {
		form = formMsgpack
		if looksLikeFrame(b) {
			form = formFrame
		}
	}
	switch form {
	case formMsgpack:
		return wire.Unmarshal(b)
	case formFrame:
		return frame.Decode(b)
	}
	return nil, fmt.Errorf("%w %q", errForm, form)
}

// looksLikeFrame reports whether b has the shape of a tensor frame (SPEC
// §4): a u32 LE header_len whose header, b[4:4+header_len], is one msgpack
// array of 3 items ending in a 16-byte bin nonce, with the tensor data
// start align16(4+header_len) inside b. Plain msgpack practically never
// passes: its first four bytes read as a length would have to point exactly
// at the end of such an array. The check reads only within b.
func looksLikeFrame(b []byte) bool {
	if len(b) < 4 {
		return false
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if 4+n > uint64(len(b)) || (4+n+15)&^15 > uint64(len(b)) {
		return false
	}
	header, err := wire.Unmarshal(b[4 : 4+n])
	if err != nil {
		return false
	}
	parts, ok := header.([]any)
	if !ok || len(parts) != 3 {
		return false
	}
	nonce, ok := parts[2].([]byte)
	return ok && len(nonce) == 16
}
