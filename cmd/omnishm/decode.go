package main

import (
	"context"
	"fmt"
	"strings"

	"omnishm/jsonform"
)

func init() {
	register(command{
		name:    "decode",
		usage:   "[--as auto|frame|msgpack] [FILE|-]",
		summary: "read a payload's bytes and print its JSON form (SPEC §10) on one line",
		run:     runDecode,
	})
}

func runDecode(ctx context.Context, args []string, inv *invocation) int {
	fs := inv.flags()
	as := fs.String("as", formAuto, "byte form to read: frame (SPEC §4), msgpack (SPEC §5), or auto: a frame\n"+
		"when the bytes start with a u32 header length whose header is a msgpack\n"+
		"array of 3 ending in a 16-byte nonce, msgpack otherwise")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	switch *as {
	case formAuto, formFrame, formMsgpack:
	default:
		return inv.usageError("--as %q: want auto, frame or msgpack", *as)
	}
	if fs.NArg() > 1 {
		return inv.usageError("want at most one input file, got %s", strings.Join(fs.Args(), " "))
	}
	b, err := inv.readInput(fs.Args())
	if err != nil {
		return inv.fail(err)
	}
	v, err := decodePayload(b, *as)
	if err != nil {
		return inv.fail(fmt.Errorf("decode: %w", err))
	}
	text, err := jsonform.Marshal(v)
	if err != nil {
		return inv.fail(err)
	}
	if _, err := fmt.Fprintf(inv.out, "%s\n", text); err != nil {
		return inv.fail(fmt.Errorf("write stdout: %w", err))
	}
	return exitOK
}
