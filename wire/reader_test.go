package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"omnishm/wire"
)

// TestReaderReads: each method reads every msgpack form of its type and
// leaves the position after the value.
func TestReaderReads(t *testing.T) {
	read := map[string]func(*wire.Reader) (any, error){
		"ArrayLen": func(r *wire.Reader) (any, error) { return r.ArrayLen() },
		"Bin":      func(r *wire.Reader) (any, error) { return r.Bin() },
		"Str":      func(r *wire.Reader) (any, error) { return r.Str() },
		"Int":      func(r *wire.Reader) (any, error) { return r.Int() },
		"Uint":     func(r *wire.Reader) (any, error) { return r.Uint() },
		"Ext":      func(r *wire.Reader) (any, error) { return r.Ext() },
		"Skip":     func(r *wire.Reader) (any, error) { return nil, r.Skip() },
	}
	cases := []struct {
		method, in string // in: hex; after a "|", what the read leaves
		want       any
	}{
		{"ArrayLen", "92|c0c0", 2},
		{"ArrayLen", "90", 0}, // the short forms at the input's end
		{"Bin", "c400", []byte{}},
		{"Str", "a0", []byte("")},
		{"Uint", "00", uint64(0)},
		{"ArrayLen", "dc0002|c0c0", 2},
		{"ArrayLen", "dd00000001|c0", 1},
		{"Bin", "c4020102", []byte{1, 2}},
		{"Bin", "c5000103", []byte{3}},
		{"Bin", "c60000000104", []byte{4}},
		{"Str", "a26162", []byte("ab")},
		{"Str", "d90161", []byte("a")},
		{"Str", "da000161", []byte("a")},
		{"Str", "db0000000161", []byte("a")},
		{"Int", "7f", int64(127)},
		{"Int", "e0", int64(-32)},
		{"Int", "d080", int64(math.MinInt8)},
		{"Int", "d38000000000000000", int64(math.MinInt64)},
		{"Int", "ceffffffff", int64(math.MaxUint32)},
		{"Int", "cf7fffffffffffffff", int64(math.MaxInt64)},
		{"Uint", "05", uint64(5)},
		{"Uint", "cc80", uint64(128)},
		{"Uint", "cfffffffffffffffff", uint64(math.MaxUint64)},
		{"Uint", "d005", uint64(5)}, // a signed form of a non-negative value
		{"Uint", "d30000000000000100", uint64(256)},
		{"Ext", "d42a07", wire.Ext{Code: 42, Data: []byte{7}}},
		{"Ext", "d8ff" + strings.Repeat("00", 16), wire.Ext{Code: -1, Data: make([]byte, 16)}},
		{"Ext", "c7022a0102", wire.Ext{Code: 42, Data: []byte{1, 2}}},
		{"Ext", "c800012a01", wire.Ext{Code: 42, Data: []byte{1}}},
		{"Ext", "c9000000002a", wire.Ext{Code: 42, Data: []byte{}}},
		{"Skip", "c0", nil},
		{"Skip", "cb3ff8000000000000", nil},
		{"Skip", "82a16192c3c2a162c4020102", nil},
		{"Skip", "dc0002" + "d42a07" + "c7022a0102", nil},
		{"Skip", "df00000001" + "a0" + "db00000000", nil},
		{"Skip", strings.Repeat("91", 10000) + "c0", nil}, // deep, no recursion
		{"Skip", "a2c328", nil},                           // structure only: bad UTF-8 passes
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.in, func(t *testing.T) {
			value, rest, _ := strings.Cut(c.in, "|")
			r := wire.NewReader(mustHex(value + rest))
			got, err := read[c.method](r)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", c.want) {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
			if want := len(rest) / 2; r.Len() != want {
				t.Fatalf("Len() = %d after the value, want %d", r.Len(), want)
			}
		})
	}
}

// TestReaderRefuses: a value of another type, a truncated value or a
// forged length is an error wrapping ErrCorrupt.
func TestReaderRefuses(t *testing.T) {
	read := map[string]func(*wire.Reader) error{
		"ArrayLen": func(r *wire.Reader) error { _, err := r.ArrayLen(); return err },
		"Bin":      func(r *wire.Reader) error { _, err := r.Bin(); return err },
		"Str":      func(r *wire.Reader) error { _, err := r.Str(); return err },
		"Int":      func(r *wire.Reader) error { _, err := r.Int(); return err },
		"Uint":     func(r *wire.Reader) error { _, err := r.Uint(); return err },
		"Ext":      func(r *wire.Reader) error { _, err := r.Ext(); return err },
		"Skip":     func(r *wire.Reader) error { return r.Skip() },
	}
	cases := []struct{ method, in string }{
		{"ArrayLen", ""},
		{"ArrayLen", "80"},
		{"ArrayLen", "93c0c0"}, // three elements in two bytes
		{"ArrayLen", "91"},
		{"ArrayLen", "ddffffffff"},
		{"ArrayLen", "dc00"},
		{"Bin", "a161"},
		{"Bin", "c405"},
		{"Bin", "c40201"},
		{"Bin", "c4"},
		{"Bin", "c6ffffffff00"},
		{"Str", "c40161"},
		{"Str", "a3616263"[:6]},
		{"Str", "a2c328"},
		{"Str", "a1"},
		{"Str", "bf61"}, // fixstr of 31 bytes, one there
		{"Str", "dbffffffff"},
		{"Int", "cfffffffffffffffff"},
		{"Int", "ca3fc00000"},
		{"Int", "cd01"},
		{"Int", "c0"},
		{"Uint", "ff"},
		{"Uint", "d0fe"},
		{"Uint", "d38000000000000000"},
		{"Uint", "a0"},
		{"Ext", "c40100"},
		{"Ext", "d82a00"},
		{"Ext", "c9ffffffff2a"},
		{"Ext", "c701"},
		{"Skip", ""},
		{"Skip", "c1"},
		{"Skip", "92c0"},
		{"Skip", "ddffffffff"},
		{"Skip", "dfffffffff"},
		{"Skip", "df7fffffff" + "c0c0"},
		{"Skip", "81c0"},
		{"Skip", "c9ffffffff2a"},
		{"Skip", strings.Repeat("91", 10000)},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.in, func(t *testing.T) {
			if err := read[c.method](wire.NewReader(mustHex(c.in))); !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

// Returned bytes alias the input; a Reader never writes to it.
func TestReaderAliasesInput(t *testing.T) {
	in := mustHex("c4020102a26162")
	keep := bytes.Clone(in)
	r := wire.NewReader(in)
	bin, _ := r.Bin()
	str, _ := r.Str()
	if !bytes.Equal(in, keep) {
		t.Fatal("the reader wrote to its input")
	}
	in[2], in[6] = 9, 'z'
	if bin[0] != 9 || str[1] != 'z' {
		t.Fatalf("Bin and Str copied: %x %q", bin, str)
	}
	if cap(bin) != len(bin) || cap(str) != len(str) {
		t.Fatal("an append to Bin's or Str's bytes would write to the input")
	}
	var zero wire.Reader
	if _, err := zero.Int(); !errors.Is(err, wire.ErrCorrupt) || zero.Len() != 0 {
		t.Fatalf("zero Reader: %v, Len %d", err, zero.Len())
	}
}
