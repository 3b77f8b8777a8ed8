package keys

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		key string
		ok  bool
	}{
		{"req-1_0_0", true},
		{"a.b-c~", true},
		{"..a", true},
		{"../etc/passwd", false},
		{"/abs", false},
		{"ünïcode-κλειδί", true},
		{"ключ", true},
		{strings.Repeat("k", NameMax-lockOverhead), true},
		{strings.Repeat("k", NameMax-lockOverhead+1), false},
		{strings.Repeat("k", NameMax+1), false},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a\x00b", false},
		{"\xff", false},
	}
	for _, c := range cases {
		err := Check(c.key)
		if (err == nil) != c.ok {
			t.Errorf("Check(%q) = %v, want ok %v", Shorten(c.key), err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrBadKey) {
			t.Errorf("Check(%q) = %v, does not wrap ErrBadKey", Shorten(c.key), err)
		}
	}
}

func TestInPrefix(t *testing.T) {
	cases := []struct {
		prefix, key string
		want        bool
	}{
		{"req_0_", "req_0_12", true},
		{"req_0_", "req_0_1x", false},
		{"req_0_", "request_0_1", false},
		{"req_0_", "req_0_", false},
		{"", "123", true},
		{"req_0_", "req_0_0", true},
		{"req_0_", "req_0_10other", false},
		{"req_0_", "req_0_-1", false},
		{"", "12a", false},
		{"", "", false},
		{"r", "r٣", false}, // a non-ASCII digit
	}
	for _, c := range cases {
		if got := InPrefix(c.prefix, c.key); got != c.want {
			t.Errorf("InPrefix(%q, %q) = %v, want %v", c.prefix, c.key, got, c.want)
		}
	}
}
