//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"omnishm/frame"
	"omnishm/wire"
)

// The byte forms a payload travels in, as --as names them.
const (
	formMsgpack = "msgpack" // serialized bytes, SPEC §5 (payload kind 0)
	formFrame   = "frame"   // tensor frame, SPEC §4 (payload kind 1)
	formAuto    = "auto"    // encode: a frame with tensors, else msgpack; decode: frame.Detect tells the two apart
)

// encoders and decoders map each --as to the codec that owns the form. As
// SPEC §4 says, a payload without tensors has no frame form: frame.Marshal
// writes its plain msgpack, so to encode, auto and frame are one.
var (
	encoders = map[string]func(any) ([]byte, error){
		formMsgpack: wire.Marshal,
		formFrame:   frame.Marshal,
		formAuto:    frame.Marshal,
	}
	decoders = map[string]func([]byte) (any, error){
		formMsgpack: wire.Unmarshal,
		formFrame:   frame.Decode,
		formAuto: func(b []byte) (any, error) {
			if frame.Detect(b) {
				return frame.Decode(b)
			}
			return wire.Unmarshal(b)
		},
	}
)

// decode decodes b as form. When that fails its error says what the input
// looks like where that tells more than the codec's error: JSON (encode's
// input), a frame given as msgpack, a frame cut short.
func decode(form string, b []byte) (any, error) {
	v, err := decoders[form](b)
	if err == nil {
		return v, nil
	}
	switch {
	case json.Valid(b):
		return nil, errors.New("input is JSON, not a payload's bytes (a frame or msgpack): 'omnishm encode' turns the JSON form into them")
	case form == formMsgpack && frame.Detect(b):
		return nil, errors.New("input is a tensor frame, not msgpack: use --as frame or auto")
	case form == formFrame && !frame.Begins(b):
		if _, werr := wire.Unmarshal(b); werr == nil {
			return nil, errors.New("input is msgpack, not a tensor frame: use --as msgpack or auto")
		}
		return nil, fmt.Errorf("input is not a tensor frame: %w", err)
	case form == formFrame:
		return nil, fmt.Errorf("input begins as a tensor frame but is cut short or corrupt: %w", err)
	case form == formAuto && frame.Begins(b):
		_, ferr := frame.Decode(b)
		return nil, fmt.Errorf("input begins as a tensor frame but is cut short or corrupt: %w", ferr)
	case form == formAuto:
		return nil, fmt.Errorf("input is neither a tensor frame nor msgpack: %w", err)
	}
	return nil, fmt.Errorf("input is not msgpack: %w", err)
}

// codecArgs parses the arguments of encode and decode, the same for both:
// --as (def when not given), which must be one of forms, and at most one
// input file, which it reads. When ok is false the
// command returns code at once.
func codecArgs(inv *invocation, args []string, def, help string, forms ...string) (as string, input []byte, code int, ok bool) {
	fs := inv.flags()
	form := fs.String("as", def, help)
	if code, ok := inv.parse(fs, args); !ok {
		return "", nil, code, false
	}
	choice := strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
	switch {
	case !slices.Contains(forms, *form):
		return "", nil, inv.usageError("--as %q: want %s", *form, choice), false
	case fs.NArg() > 1:
		return "", nil, inv.usageError("want at most one input file, got %s", strings.Join(fs.Args(), " ")), false
	}
	input, err := inv.readInput(fs.Args())
	if err != nil {
		return "", nil, inv.fail(err), false
	}
	return *form, input, exitOK, true
}
