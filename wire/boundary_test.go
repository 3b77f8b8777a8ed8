package wire_test

import (
	"bytes"
	"io"
	"omnishm/internal/vectortest"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"omnishm/wire"
)

// Lengths at every header-size boundary encode as valid msgpack (checked by
// an independent decoder) and decode back to themselves.
func TestLengthBoundaries(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536} {
		list := make([]any, n)
		for i := range list {
			list[i] = int64(i - n/2) // negative and positive forms
		}
		m := make(map[string]any, n)
		for i := range n {
			m[strings.Repeat("k", i%40)+string(rune('a'+i%26))+string(rune(i))] = int64(i)
		}
		values := map[string]any{
			"str":  strings.Repeat("é", n/2) + strings.Repeat("x", n%2),
			"bin":  bytes.Repeat([]byte{7}, n),
			"list": list,
			"map":  m,
		}
		if n > 0 {
			values["ext"] = wire.Ext{Code: -5, Data: bytes.Repeat([]byte{3}, n)}
		}
		for kind, v := range values {
			b, err := wire.Marshal(v)
			if err != nil {
				t.Fatalf("%s %d: %v", kind, n, err)
			}
			got, err := wire.Unmarshal(b)
			if err != nil {
				t.Fatalf("%s %d: %v", kind, n, err)
			}
			if err := vectortest.SameValue(got, v); err != nil {
				t.Fatalf("%s %d: %v", kind, n, err)
			}
			// msgpack/v5 decodes only registered extensions; it can skip any.
			d := msgpack.NewDecoder(bytes.NewReader(b))
			if err := d.Skip(); err != nil {
				t.Fatalf("%s %d: msgpack/v5 rejects our encoding: %v", kind, n, err)
			}
			if err := d.Skip(); err != io.EOF {
				t.Fatalf("%s %d: msgpack/v5 sees more than one value: %v", kind, n, err)
			}
		}
	}
}
