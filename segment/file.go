//go:build linux

package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// fileID identifies a file: a name re-created since has another one.
type fileID struct{ dev, ino uint64 }

// fileInfo is what the protocol needs to know of a segment or lock file.
type fileInfo struct {
	id      fileID
	regular bool
	uid     int
	size    int64
	mtime   time.Time
}

// Outcomes of looking at or locking a file that mean "not now", not
// failure: Claim turns them into a miss, a sweep into a skip.
var (
	errBusy     = errors.New("lock held by another process")
	errGone     = errors.New("no such file")
	errReplaced = errors.New("replaced while locking")
)

// ErrUnsafe is wrapped by Claim's error when a file at the key's names is
// not one a receiver of this user may take: a symlink, something other than
// a regular file, or another user's file (anyone may plant one in sticky
// /dev/shm; as root, Claim could read and unlink it). Nothing was read or
// removed; a caller treats it as a miss of that key.
var ErrUnsafe = errors.New("not a regular file of this user")

var errNotRegular = fmt.Errorf("%w: not a regular file", ErrUnsafe)

// foreign is the error about a file of another user.
// denied is ErrUnsafe for a file this process may not open (EACCES, EPERM):
// another user's, whatever its owner field says by the time we look.
func denied(err error) error { return fmt.Errorf("%w: %w", ErrUnsafe, err) }

func foreign(uid int) error { return fmt.Errorf("%w: it belongs to uid %d", ErrUnsafe, uid) }

// pathError keeps errno values comparable with errors.Is (fs.ErrNotExist,
// unix.EFBIG) behind the file's name.
func pathError(op, path string, err error) error {
	return &fs.PathError{Op: op, Path: path, Err: err}
}
