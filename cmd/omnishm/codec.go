//go:build linux

package main

import (
	"context"
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

// codecForms are the values of encode's and decode's --as, its default first.
var codecForms = []string{formAuto, formFrame, formMsgpack}

// codecUsage is encode's and decode's usage line.
var codecUsage = "[--as " + strings.Join(codecForms, "|") + "] [FILE|-]"

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

// codecRun is the run function of encode and decode, which parse the same
// arguments: --as (described by help), one of codecForms, and at most one
// input file, which it reads and hands to convert with the form chosen.
func codecRun(help string, convert func(inv *invocation, as string, input []byte) int) func(context.Context, []string, *invocation) int {
	return func(_ context.Context, args []string, inv *invocation) int {
		fs := inv.flags()
		as := fs.String("as", codecForms[0], help)
		if code, ok := inv.parse(fs, args); !ok {
			return code
		}
		choice := strings.Join(codecForms[:len(codecForms)-1], ", ") + " or " + codecForms[len(codecForms)-1]
		switch {
		case !slices.Contains(codecForms, *as):
			return inv.usageError("--as %q: want %s", *as, choice)
		case fs.NArg() > 1:
			return inv.usageError("want at most one input file, got %s", strings.Join(fs.Args(), " "))
		}
		input, err := inv.readInput(fs.Args())
		if err != nil {
			return inv.fail(err)
		}
		return convert(inv, *as, input)
	}
}
