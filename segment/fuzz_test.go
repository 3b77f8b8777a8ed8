//go:build linux

package segment

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzClaim plays a corrupt or hostile segment, in the plain or the
// OMNIIPC1 form, against a receiver's whole claim: the file is read,
// unwrapped and removed with its lock file whatever its bytes say, and what
// Claim returns is exactly the plain bytes or the checked OMNIIPC1 body.
func FuzzClaim(f *testing.F) {
	f.Add([]byte("\x93\x01\x02\x03"))
	f.Add(wrap([]byte("body")))
	f.Add(wrap(nil))
	f.Add([]byte("OMNIIPC1"))
	f.Add(append(wrap([]byte("body")), 'x'))
	f.Add([]byte("OMNIIPC1\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00body"))
	f.Add([]byte("OMNIIPC1\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00"))
	const key = "fuzzed"
	dir, seg, lock := keyFiles(f, key)
	f.Fuzz(func(t *testing.T, raw []byte) {
		if err := os.WriteFile(seg, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lock, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(seg)
		defer os.Remove(lock)
		data, ok, err := Claim(dir, key)
		switch {
		case len(raw) == 0:
			// An empty segment is not ready yet: a miss that takes nothing.
			if ok || err != nil {
				t.Fatalf("empty segment: ok=%v err=%v", ok, err)
			}
			return
		case !bytes.HasPrefix(raw, []byte(wrapMagic)):
			if !ok || err != nil || !bytes.Equal(data, raw) {
				t.Fatalf("plain segment: %d bytes, ok=%v err=%v", len(data), ok, err)
			}
		case err != nil:
			if ok || data != nil || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("corrupt segment: %d bytes, ok=%v err=%v", len(data), ok, err)
			}
		default:
			if !ok || !bytes.Equal(wrap(data), raw) {
				t.Fatalf("accepted a header that does not describe its body: ok=%v", ok)
			}
		}
		for _, p := range []string{seg, lock} {
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s left after a claim: %v", p, err)
			}
		}
	})
}
