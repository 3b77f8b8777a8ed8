//go:build linux

package main

import (
	"fmt"

	"omnishm/jsonform"
)

func init() {
	register(command{
		name:     "decode",
		usage:    codecUsage,
		summary:  "read a payload's bytes and print its JSON form (SPEC §10) on one line",
		examples: []string{"omnishm decode testdata/vectors/codes56.frame", "omnishm encode payload.json | omnishm decode"},
		run: codecRun("byte form to read: frame (SPEC §4), msgpack (SPEC §5), or auto: a frame\n"+
			"when the bytes start with a valid tensor frame header (its u32 length, then\n"+
			"[descriptors, tree, 16-byte nonce]), msgpack otherwise", decodeAs),
	})
}

func decodeAs(inv *invocation, as string, b []byte) int {
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
