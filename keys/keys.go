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
