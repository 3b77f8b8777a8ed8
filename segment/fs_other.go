//go:build !linux

package segment

import (
	"errors"
	"time"
)

// The per-key path needs POSIX shared memory in a file system (/dev/shm)
// and flock; other systems get an error at every use.

var (
	errBusy = errors.New("lock held by another process")
	errGone = errors.New("no such publication")
)

func lockFile(string, bool) (int, error) { return -1, errors.ErrUnsupported }
func writeSegment(string, []byte) (bool, fileID, error) {
	return false, fileID{}, errors.ErrUnsupported
}
func segmentAt(string) (fileID, error)                       { return fileID{}, errors.ErrUnsupported }
func segmentSize(string) (int64, error)                      { return 0, errors.ErrUnsupported }
func readSegment(string) ([]byte, error)                     { return nil, errors.ErrUnsupported }
func remove(string) (bool, error)                            { return false, errors.ErrUnsupported }
func exists(string) bool                                     { return true }
func closeFD(int)                                            {}
func sweepLock(string, string, int, time.Time) (bool, error) { return false, errors.ErrUnsupported }
