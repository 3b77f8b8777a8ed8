//go:build linux

package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// The OMNIIPC1 form some Python builds write (SPEC §6): accepted when its
// header checks out, refused as ErrCorrupt otherwise.

func TestWrappedSegment(t *testing.T) {
	body := shmtest.Payload(1000, 3)
	bad := wrap(body)
	bad[16] ^= 1
	cases := []struct {
		name    string
		content []byte
		want    []byte
	}{
		{"plain", body, body},
		{"wrapped", wrap(body), body},
		{"wrapped empty body", wrap(nil), []byte{}},
		{"bad crc", bad, nil},
		{"short header", []byte("OMNIIPC1\x00\x00"), nil},
		{"long length", append(wrap(body)[:19:19], 0, 1), nil},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := shmtest.Key("wrapped")
			// Play the Python producer: segment bytes and lock file.
			shmtest.WriteFile(t, dir+"/"+key, c.content)
			shmtest.WriteFile(t, dir+"/"+scope.LockName(key), nil)
			got, ok, err := Claim(dir, key)
			if c.want == nil {
				if !errors.Is(err, ErrCorrupt) || ok || got != nil {
					t.Fatalf("got %d bytes ok=%v err=%v, want ErrCorrupt", len(got), ok, err)
				}
			} else if err != nil || !ok || !bytes.Equal(got, c.want) {
				t.Fatalf("got %d bytes ok=%v err=%v", len(got), ok, err)
			}
			keyGone(t, dir, key)
		})
	}
}

// wrap returns payload in the OMNIIPC1 form, as the wrapping Python build
// writes it (producers here write the plain form).
func wrap(payload []byte) []byte {
	out := make([]byte, wrapHeader+len(payload))
	copy(out, wrapMagic)
	binary.BigEndian.PutUint64(out[8:16], uint64(len(payload)))
	binary.BigEndian.PutUint32(out[16:20], crc32.ChecksumIEEE(payload))
	copy(out[wrapHeader:], payload)
	return out
}

func TestUnwrap(t *testing.T) {
	body := []byte("\x82\xa1a\x01\xa1b\xc3")
	w := wrap(body)
	if len(w) != 20+len(body) || string(w[:8]) != "OMNIIPC1" {
		t.Fatalf("wrap header % x", w[:20])
	}
	for i := 8; i < len(w); i++ {
		c := bytes.Clone(w)
		c[i] ^= 0x40
		if _, err := unwrap(c); !errors.Is(err, ErrCorrupt) {
			t.Errorf("flipped byte %d accepted: %v", i, err)
		}
	}
	for n := 0; n < len(w); n++ {
		if _, err := unwrap(w[:n]); n >= 8 && !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated to %d accepted: %v", n, err)
		}
	}
	if got, err := unwrap(w); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("unwrap: %q %v", got, err)
	}
}

func FuzzUnwrap(f *testing.F) {
	f.Add([]byte("plain"))
	f.Add(wrap([]byte("body")))
	f.Add(wrap(nil))
	f.Add([]byte("OMNIIPC1"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := unwrap(raw)
		if !bytes.HasPrefix(raw, []byte(wrapMagic)) {
			if err != nil || !bytes.Equal(got, raw) {
				t.Fatalf("plain bytes changed: %v", err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || got != nil {
				t.Fatalf("error %v with %d bytes", err, len(got))
			}
			return
		}
		if !bytes.Equal(wrap(got), raw) {
			t.Fatal("accepted a header that does not describe its body")
		}
	})
}
