package keys

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
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

// plain, Check's one-pass path, agrees with the byte rules it stands for
// at every position of an eight-byte word and in the tail.
func TestPlain(t *testing.T) {
	for n := range 20 {
		base := strings.Repeat("k", n)
		if got := plain(base); got != (n > 0) {
			t.Errorf("plain(%q) = %v", base, got)
		}
		for i := range n {
			for _, c := range []byte{0, '/', 0x7f, 0x80, 0xff, '.', '0' - 1, 1, 0x2e, 0x30} {
				k := base[:i] + string([]byte{c}) + base[i+1:]
				want := c != 0 && c != '/' && c < 0x80
				if got := plain(k); got != want {
					t.Errorf("plain(%q) = %v, want %v", k, got, want)
				}
			}
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	key := "omt12345-BenchmarkPairFlockRatio-pair123456"
	for b.Loop() {
		if Check(key) != nil {
			b.Fatal("rejected")
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

// FuzzCheck feeds Check arbitrary keys, as a peer's ring frame or segment
// name carries them: no panic, every refusal wraps ErrBadKey, and the
// verdict is the one SPEC §1's rules give spelled out one by one (so plain's
// word-at-a-time shortcut agrees with them).
func FuzzCheck(f *testing.F) {
	for _, k := range []string{"req-1_0_0", "..", ".", "a/b", "a\x00b", "\xff", "ключ", strings.Repeat("k", 237), strings.Repeat("k", 238)} {
		f.Add(k, "req_")
	}
	f.Fuzz(func(t *testing.T, key, prefix string) {
		err := Check(key)
		want := key != "" && key != "." && key != ".." && !strings.ContainsAny(key, "/\x00") &&
			utf8.ValidString(key) && len(key)+lockOverhead <= NameMax
		if (err == nil) != want {
			t.Fatalf("Check(%q) = %v, want ok %v", key, err, want)
		}
		if err != nil && !errors.Is(err, ErrBadKey) {
			t.Fatalf("Check(%q) error %v does not wrap ErrBadKey", key, err)
		}
		if s := Shorten(key); len(s) > 64 {
			t.Fatalf("Shorten(%q) is %d bytes", key, len(s))
		}
		if InPrefix(prefix, key) && !strings.HasPrefix(key, prefix) {
			t.Fatalf("InPrefix(%q, %q)", prefix, key)
		}
	})
}
