//go:build linux

package natsconn

import (
	"errors"
	"fmt"
	"strings"
)

// A publication's entry in the bucket is keyed from.to.key: one subject
// token per part, so a receiver watches its own stage's edges with the
// filter *.{to}.* and nothing else. NATS keys hold only [-/_=.A-Za-z0-9]
// and a dot separates tokens, while stage ids and keys are any UTF-8
// (SPEC §1), so each part is escaped: letters, digits, '_' and '-' stay,
// every other byte becomes '=' and two upper-case hex digits, and the empty
// string is a lone "=". The escape is a bijection: DecodeKey accepts only
// what EncodeKey writes.

const hexDigits = "0123456789ABCDEF"

// EncodeKey returns the bucket key of key on edge from->to. Chunk keys such
// as req-1_0_12 are unchanged: 0.1.req-1_0_12.
func EncodeKey(from, to, key string) string {
	return escape(from) + "." + escape(to) + "." + escape(key)
}

// DecodeKey reverses EncodeKey. It fails for a key EncodeKey cannot have
// written.
func DecodeKey(entryKey string) (from, to, key string, err error) {
	parts := strings.Split(entryKey, ".")
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("natsconn: entry key %q: want from.to.key", entryKey)
	}
	for i, p := range parts {
		if parts[i], err = unescape(p); err != nil {
			return "", "", "", fmt.Errorf("natsconn: entry key %q: %w", entryKey, err)
		}
	}
	return parts[0], parts[1], parts[2], nil
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

func escape(s string) string {
	if s == "" {
		return "="
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; plain(c) {
			b = append(b, c)
		} else {
			b = append(b, '=', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return string(b)
}

func unescape(t string) (string, error) {
	switch {
	case t == "=":
		return "", nil
	case t == "":
		return "", errors.New("empty part")
	case strings.IndexByte(t, '=') < 0:
		for i := 0; i < len(t); i++ {
			if !plain(t[i]) {
				return "", fmt.Errorf("byte %q is not escaped", t[i])
			}
		}
		return t, nil
	}
	b := make([]byte, 0, len(t))
	for i := 0; i < len(t); i++ {
		c := t[i]
		if plain(c) {
			b = append(b, c)
			continue
		}
		if c != '=' || i+2 >= len(t) {
			return "", fmt.Errorf("byte %q is not escaped", c)
		}
		hi, lo := strings.IndexByte(hexDigits, t[i+1]), strings.IndexByte(hexDigits, t[i+2])
		v := byte(hi<<4 | lo)
		if hi < 0 || lo < 0 || plain(v) {
			// Lower-case digits or an escaped plain byte: not EncodeKey's.
			return "", fmt.Errorf("bad escape %q", t[i:i+3])
		}
		b = append(b, v)
		i += 2
	}
	return string(b), nil
}
