// Package segment is the per-key shared-memory path of SPEC §6: one POSIX
// shm segment per key at {dir}/{key}, guarded by the lock file
// {dir}/shm_{key}_lockfile.lock, with the same file names, lock protocol and
// bytes as vLLM-Omni's Python SharedMemoryConnector. It moves bytes only; the
// caller serializes (SPEC §5).
package segment

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// DefaultDir is where POSIX shared memory lives on Linux; shm_open("/key")
// is the file DefaultDir/key.
const DefaultDir = "/dev/shm"

// nameMax is NAME_MAX: the longest file name a Linux file system accepts.
const nameMax = 255

// Lock file name around the key (SPEC §6).
const (
	lockPrefix = "shm_"
	lockSuffix = "_lockfile.lock"
)

// ErrBadKey is wrapped by every error about a key that cannot name a segment.
var ErrBadKey = errors.New("segment: bad key")

// CheckKey reports whether key can name a segment and its lock file: SPEC §1
// rejects keys that are empty, contain '/' or NUL, are "." or "..", or are
// longer than a file name may be; keys must also be UTF-8, as the Python
// side's are. The lock file name is 18 bytes longer than
// the key, so keys over 237 bytes are rejected too.
func CheckKey(key string) error {
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
	case len(key) > nameMax:
		why = fmt.Sprintf("is %d bytes, over %d", len(key), nameMax)
	case len(lockPrefix)+len(key)+len(lockSuffix) > nameMax:
		why = fmt.Sprintf("is %d bytes: its lock file name would exceed %d", len(key), nameMax)
	default:
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrBadKey, shorten(key), why)
}

// shorten keeps error messages readable for very long keys.
func shorten(key string) string {
	if len(key) <= 64 {
		return key
	}
	return key[:61] + "..."
}

// lockName is the lock file's name for key (SPEC §6).
func lockName(key string) string { return lockPrefix + key + lockSuffix }

// keyOfLockName returns the key whose lock file is called name, if any.
func keyOfLockName(name string) (string, bool) {
	if !strings.HasPrefix(name, lockPrefix) || !strings.HasSuffix(name, lockSuffix) ||
		len(name) < len(lockPrefix)+len(lockSuffix) {
		return "", false
	}
	key := name[len(lockPrefix) : len(name)-len(lockSuffix)]
	return key, CheckKey(key) == nil
}

// matchesPrefix reports whether key is prefix followed by one or more ASCII
// decimal digits: the chunk keys `{request}_{stage}_{chunk}` that
// cleanup_prefix retires (SPEC §9).
func matchesPrefix(prefix, key string) bool {
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
