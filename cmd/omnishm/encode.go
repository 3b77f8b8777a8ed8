//go:build linux

package main

import (
	"fmt"

	"omnishm/jsonform"
)

func init() {
	register(command{
		name:     "encode",
		usage:    codecUsage,
		summary:  "read a payload's JSON form (SPEC §10) and write its bytes to stdout",
		examples: []string{"omnishm encode payload.json > payload.frame", "omnishm encode --as msgpack payload.json > payload.msgpack"},
		run: codecRun("byte form to write: auto or frame (a tensor frame, SPEC §4, for a payload with\n"+
			"tensors; one without is written as msgpack, as SPEC §4 sends it), or msgpack (SPEC §5)", encodeAs),
	})
}

func encodeAs(inv *invocation, as string, text []byte) int {
	v, err := jsonform.Unmarshal(text)
	if err != nil {
		return inv.fail(fmt.Errorf("input is not a payload's JSON form: %w", err))
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
