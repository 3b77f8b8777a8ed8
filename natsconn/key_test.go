//go:build linux

package natsconn

import (
	"strings"
	"testing"
)

func TestEncodeKey(t *testing.T) {
	cases := []struct{ from, to, key, want string }{
		{"0", "1", "req-1_0_12", "0.1.req-1_0_12"},
		{"", "1", "k", "=.1.k"},
		{"0", "1", "", "0.1.="},
		{"enc", "dec.v2", "a.b*c>d", "enc.dec=2Ev2.a=2Eb=2Ac=3Ed"},
		{"0", "1", "k=v w", "0.1.k=3Dv=20w"},
		{"0", "1", "é", "0.1.=C3=A9"},
		{"0", "1", "=", "0.1.=3D"},
	}
	for _, c := range cases {
		got := EncodeKey(c.from, c.to, c.key)
		if got != c.want {
			t.Errorf("EncodeKey(%q, %q, %q) = %q, want %q", c.from, c.to, c.key, got, c.want)
		}
		from, to, key, err := DecodeKey(got)
		if err != nil || from != c.from || to != c.to || key != c.key {
			t.Errorf("DecodeKey(%q) = %q %q %q %v", got, from, to, key, err)
		}
	}
	// What EncodeKey never writes does not decode: one string, one key.
	for _, bad := range []string{"0.1", "0.1.k.x", "0..k", "0.1.=2", "0.1.=2e", "0.1.=41", "0.1.a b", "0.1.=zz", "0.1.k="} {
		if _, _, _, err := DecodeKey(bad); err == nil {
			t.Errorf("DecodeKey(%q) accepted", bad)
		}
	}
}

func FuzzEncodeKey(f *testing.F) {
	f.Add("0", "1", "req-1_0_12")
	f.Add("", "dec.v2", "a.b*c>d=é")
	f.Fuzz(func(t *testing.T, from, to, key string) {
		k := EncodeKey(from, to, key)
		if strings.Count(k, ".") != 2 || strings.Contains(k, "..") || strings.HasPrefix(k, ".") || strings.HasSuffix(k, ".") {
			t.Fatalf("%q is not three subject tokens", k)
		}
		for i := 0; i < len(k); i++ {
			if c := k[i]; !plain(c) && c != '=' && c != '.' {
				t.Fatalf("%q holds %q, which NATS keys may not", k, c)
			}
		}
		f2, t2, k2, err := DecodeKey(k)
		if err != nil || f2 != from || t2 != to || k2 != key {
			t.Fatalf("round trip of %q %q %q: %q %q %q %v", from, to, key, f2, t2, k2, err)
		}
		// And a decodable string encodes back to itself.
		if f3, t3, k3, err := DecodeKey(key); err == nil && EncodeKey(f3, t3, k3) != key {
			t.Fatalf("%q decodes but does not re-encode to itself", key)
		}
	})
}
