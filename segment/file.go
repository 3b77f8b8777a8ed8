package segment

import (
	"errors"
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

var errNotRegular = errors.New("not a regular file")

// pathError keeps errno values comparable with errors.Is (fs.ErrNotExist,
// unix.EFBIG) behind the file's name.
func pathError(op, path string, err error) error {
	return &fs.PathError{Op: op, Path: path, Err: err}
}
