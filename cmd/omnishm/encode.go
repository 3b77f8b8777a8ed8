//go:build linux

package main

import (
	"context"
	"fmt"

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
	as, text, code, ok := codecArgs(inv, args, "", "byte form to write: frame (tensor frame, SPEC §4; a payload without tensors\n"+
		"is written as msgpack, as SPEC §4 sends it) or msgpack (SPEC §5)", formFrame, formMsgpack)
	if !ok {
		return code
	}
	v, err := jsonform.Unmarshal(text)
	if err != nil {
		return inv.fail(err)
	}
	b, err := encoders[as](v)
	if err != nil {
		return inv.fail(fmt.Errorf("encode as %s: %w", as, err))
	}
	if _, err := inv.out.Write(b); err != nil {
		return inv.fail(fmt.Errorf("write stdout: %w", err))
	}
	return exitOK
}
