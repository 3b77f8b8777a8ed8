//go:build linux

package main

import (
	"context"
	"fmt"

	"omnishm/jsonform"
)

func init() {
	register(command{
		name:     "decode",
		usage:    "[--as auto|frame|msgpack] [FILE|-]",
		summary:  "read a payload's bytes and print its JSON form (SPEC §10) on one line",
		examples: []string{"omnishm decode testdata/vectors/codes56.frame", "omnishm encode payload.json | omnishm decode"},
		run:      runDecode,
	})
}

func runDecode(ctx context.Context, args []string, inv *invocation) int {
	as, b, code, ok := codecArgs(inv, args, formAuto, "byte form to read: frame (SPEC §4), msgpack (SPEC §5), or auto: a frame\n"+
		"when the bytes start with a valid tensor frame header (its u32 length, then\n"+
		"[descriptors, tree, 16-byte nonce]), msgpack otherwise", formAuto, formFrame, formMsgpack)
	if !ok {
		return code
	}
	v, err := decode(as, b)
	if err != nil {
		return inv.fail(err)
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
