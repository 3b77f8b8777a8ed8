//go:build !linux

package segment

import "errors"

// The per-key path needs POSIX shared memory in a file system (/dev/shm)
// and flock; on other systems every operation fails with
// errors.ErrUnsupported.

func lockFile(string, bool) (int, fileInfo, error) { return -1, fileInfo{}, errors.ErrUnsupported }
func writeSegment(string, []byte, func()) (bool, fileID, error) {
	return false, fileID{}, errors.ErrUnsupported
}
func segmentSize(string) (int64, error)  { return 0, errors.ErrUnsupported }
func readSegment(string) ([]byte, error) { return nil, errors.ErrUnsupported }
func remove(string) (bool, error)        { return false, errors.ErrUnsupported }
func lstatFile(string) (fileInfo, error) { return fileInfo{}, errors.ErrUnsupported }
func closeFD(int)                        {}
