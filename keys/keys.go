// Package keys owns what a publication key may be and which keys a chunk
// prefix selects (SPEC §1, §9). Keys come from the application and name
// files in /dev/shm, so every transport checks them here before touching
// anything.
package keys

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// NameMax is NAME_MAX: the longest file name a Linux file system accepts.
const NameMax = 255

// lockOverhead is how much longer than its key a lock file name is
// ("shm_" + key + "_lockfile.lock", SPEC §6; scope builds the name).
const lockOverhead = len("shm_") + len("_lockfile.lock")

// ErrBadKey is wrapped by every error about a key that cannot name a
// publication.
var ErrBadKey = errors.New("bad key")

// Check reports whether key can name a publication on every path: SPEC §1
// rejects keys that are empty, contain '/' or NUL, are "." or "..", or are
// longer than a file name may be; keys must also be UTF-8, as the Python
// side's are, and short enough that the lock file name (18 bytes longer)
// is a valid file name, so keys over 237 bytes are refused. The error wraps
// ErrBadKey and says why.
func Check(key string) error {
	if len(key)+lockOverhead <= NameMax && key != "." && key != ".." && plain(key) {
		return nil // the usual key, in one pass
	}
	var why string
	switch {
	case key == "":
		why = "empty"
	case key == "." || key == "..":
		why = "is a directory name"
	case strings.IndexByte(key, '/') >= 0:
		why = "contains '/'"
	case strings.IndexByte(key, 0) >= 0:
		why = "contains NUL"
	case !utf8.ValidString(key):
		// Python peers decode ring keys strictly as UTF-8 (SPEC §3) and
		// name segments with str keys: other bytes would break them.
		why = "is not valid UTF-8"
	case len(key) > NameMax:
		why = fmt.Sprintf("is %d bytes, over %d", len(key), NameMax)
	case len(key)+lockOverhead > NameMax:
		why = fmt.Sprintf("is %d bytes: its lock file name would exceed %d", len(key), NameMax)
	default:
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrBadKey, Shorten(key), why)
}

// plain reports whether key is non-empty ASCII without '/' or NUL, eight
// bytes at a time: such a key is valid UTF-8, so it passes Check's byte
// rules, and a put and a get, which each check their key, do it in one
// pass instead of three (two byte searches and a UTF-8 check).
func plain(key string) bool {
	const ones, highs, slashes = 0x0101010101010101, 0x8080808080808080, 0x2f2f2f2f2f2f2f2f
	// hasZero has a high bit set where w has a zero byte, if any.
	hasZero := func(w uint64) uint64 { return (w - ones) &^ w & highs }
	i := 0
	for ; i+8 <= len(key); i += 8 {
		b := key[i : i+8] // one bounds check, one load
		w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		if (w&highs)|hasZero(w)|hasZero(w^slashes) != 0 {
			return false
		}
	}
	for ; i < len(key); i++ {
		if c := key[i]; c == 0 || c == '/' || c >= utf8.RuneSelf {
			return false
		}
	}
	return key != ""
}

// Shorten keeps messages readable for very long keys.
func Shorten(key string) string {
	if len(key) <= 64 {
		return key
	}
	return key[:61] + "..."
}

// InPrefix reports whether key is prefix followed by one or more ASCII
// decimal digits: the chunk keys `{request}_{stage}_{chunk}` that
// cleanup_prefix retires (SPEC §9). "req_0_" selects "req_0_12", not
// "req_0_1x" nor "request_0_1"; "" selects the all-digit keys, as the
// seed's str.isdigit does (ASCII only, as SPEC says).
func InPrefix(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return false
		}
	}
	return true
}
