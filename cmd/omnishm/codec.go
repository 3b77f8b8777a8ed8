//go:build linux

package main

import (
	"slices"
	"strings"

	"omnishm/frame"
	"omnishm/wire"
)

// The byte forms a payload travels in, as --as names them.
const (
	formMsgpack = "msgpack" // serialized bytes, SPEC §5 (payload kind 0)
	formFrame   = "frame"   // tensor frame, SPEC §4 (payload kind 1)
	formAuto    = "auto"    // decode only: frame.Detect tells the two apart
)

// encoders and decoders map each --as to the codec that owns the form. As
// SPEC §4 says, a payload without tensors has no frame form: frame.Marshal
// writes its plain msgpack.
var (
	encoders = map[string]func(any) ([]byte, error){
		formMsgpack: wire.Marshal,
		formFrame:   frame.Marshal,
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

// codecArgs parses the arguments of encode and decode, the same for both:
// --as (def when not given, required when def is ""), which must be one of
// forms, and at most one input file, which it reads. When ok is false the
// command returns code at once.
func codecArgs(inv *invocation, args []string, def, help string, forms ...string) (as string, input []byte, code int, ok bool) {
	fs := inv.flags()
	form := fs.String("as", def, help)
	if code, ok := inv.parse(fs, args); !ok {
		return "", nil, code, false
	}
	choice := strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
	switch {
	case *form == "":
		return "", nil, inv.usageError("--as is required (%s)", choice), false
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
