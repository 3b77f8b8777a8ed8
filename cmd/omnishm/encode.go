package main

import (
	"context"
	"fmt"
	"strings"

	"omnishm/jsonform"
)

func init() {
	register(command{
		name:    "encode",
		usage:   "--as frame|msgpack [FILE|-]",
		summary: "read a payload's JSON form (SPEC §10) and write its bytes to stdout",
		run:     runEncode,
	})
}

func runEncode(ctx context.Context, args []string, inv *invocation) int {
	fs := inv.flags()
	as := fs.String("as", "", "byte form to write: frame (tensor frame, SPEC §4; a payload without tensors\n"+
		"is written as msgpack, as SPEC §4 sends it) or msgpack (SPEC §5)")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	switch *as {
	case formFrame, formMsgpack:
	case "":
		return inv.usageError("--as is required (frame or msgpack)")
	default:
		return inv.usageError("--as %q: want frame or msgpack", *as)
	}
	if fs.NArg() > 1 {
		return inv.usageError("want at most one input file, got %s", strings.Join(fs.Args(), " "))
	}
	text, err := inv.readInput(fs.Args())
	if err != nil {
		return inv.fail(err)
	}
	v, err := jsonform.Unmarshal(text)
	if err != nil {
		return inv.fail(err)
	}
	b, err := encodePayload(v, *as)
	if err != nil {
		return inv.fail(fmt.Errorf("encode as %s: %w", *as, err))
	}
	if _, err := inv.out.Write(b); err != nil {
		return inv.fail(fmt.Errorf("write stdout: %w", err))
	}
	return exitOK
}
