package segment

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Every open of a path in the shared directory refuses symlinks (another
// user can plant one in sticky /dev/shm) and does not leak into children.
const openFlags = unix.O_NOFOLLOW | unix.O_CLOEXEC

// Outcomes of taking a lock file that mean "not now", not failure.
var (
	errBusy = errors.New("lock held by another process")
	errGone = errors.New("no such publication")
)

// lockTries bounds how often a producer reopens a lock file that a receiver
// removed between open and flock (SPEC §6: up to 3 tries).
const lockTries = 3

// lockFile opens the lock file at path and takes its exclusive flock. A
// producer (wait) creates it 0600, blocks on the lock and reopens when the
// locked file is no longer the one at path. A receiver (!wait) never
// creates, never blocks and treats contention or a replaced file as a miss
// (errBusy, errGone). The caller closes fd, which releases the lock.
func lockFile(path string, wait bool) (int, error) {
	flags := unix.O_RDWR | openFlags
	how := unix.LOCK_EX
	tries := lockTries
	if wait {
		// O_TRUNC as Python's open("wb+"): it also renews the mtime that
		// the orphan sweep reads.
		flags |= unix.O_CREAT | unix.O_TRUNC
	} else {
		how |= unix.LOCK_NB
		tries = 1
	}
	for range tries {
		fd, err := unix.Open(path, flags, 0o600)
		if err == unix.ENOENT && !wait {
			return -1, errGone
		}
		if err != nil {
			return -1, fmt.Errorf("open lock file %s: %w", path, err)
		}
		if err := flock(fd, how); err != nil {
			unix.Close(fd)
			if err == unix.EWOULDBLOCK {
				return -1, errBusy
			}
			return -1, fmt.Errorf("lock %s: %w", path, err)
		}
		same, err := isFileAt(fd, path)
		if same {
			return fd, nil
		}
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		if !wait {
			return -1, errGone
		}
	}
	return -1, fmt.Errorf("lock %s: replaced %d times while locking", path, lockTries)
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// isFileAt reports whether the open fd is the regular file now at path (a
// receiver may have unlinked the lock file between our open and flock).
func isFileAt(fd int, path string) (bool, error) {
	var have, now unix.Stat_t
	if err := unix.Fstat(fd, &have); err != nil {
		return false, fmt.Errorf("stat lock file %s: %w", path, err)
	}
	if have.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("lock file %s is not a regular file", path)
	}
	if err := unix.Lstat(path, &now); err != nil {
		if err == unix.ENOENT {
			return false, nil
		}
		return false, fmt.Errorf("stat lock file %s: %w", path, err)
	}
	return now.Dev == have.Dev && now.Ino == have.Ino, nil
}

// writeSegment creates the segment at path holding exactly data, as
// Python's SharedMemory(create=True) does (O_CREAT|O_EXCL, 0600, ftruncate).
// An existing segment is unlinked first: the caller holds the key's lock,
// and receivers read only under it, so no one is reading the old one.
// It reports whether an old segment was replaced, and the new one's
// identity.
func writeSegment(path string, data []byte) (replaced bool, id fileID, err error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|openFlags, 0o600)
	if err == unix.EEXIST {
		// Only a file of ours is an unclaimed publication to replace: as
		// root, unlink would remove any user's file of that name.
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && int(st.Uid) != unix.Geteuid() {
			return false, id, fmt.Errorf("replace segment %s: it belongs to uid %d", path, st.Uid)
		}
		if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
			return false, id, fmt.Errorf("replace segment %s: %w", path, err)
		}
		replaced = true
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|openFlags, 0o600)
	}
	if err != nil {
		return replaced, id, fmt.Errorf("create segment %s: %w", path, err)
	}
	var st unix.Stat_t
	if err = unix.Fstat(fd, &st); err == nil {
		id = fileID{dev: uint64(st.Dev), ino: st.Ino}
		err = fill(fd, data)
	}
	unix.Close(fd)
	if err != nil {
		unix.Unlink(path)
		return replaced, fileID{}, fmt.Errorf("write segment %s: %w", path, err)
	}
	return replaced, id, nil
}

// fill sizes the new file and writes data at offset 0.
func fill(fd int, data []byte) error {
	if err := unix.Ftruncate(fd, int64(len(data))); err != nil {
		return err
	}
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(fd, data[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}

// maxSegment bounds what a receiver allocates for one segment, so a
// corrupt or hostile size is an error, not a runtime panic.
const maxSegment = 1 << 40

// segmentSize is the miss path's only system call: the segment's size, or
// errGone when it is absent or empty (a producer has not sized it yet).
func segmentSize(path string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if err == unix.ENOENT {
			return 0, errGone
		}
		return 0, fmt.Errorf("stat segment %s: %w", path, err)
	}
	if st.Size == 0 {
		return 0, errGone
	}
	return st.Size, nil
}

// readSegment copies the whole segment at path into memory the caller owns.
// The caller holds the key's lock.
func readSegment(path string) ([]byte, error) {
	// O_NONBLOCK: a FIFO planted at the name must not block the open.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|openFlags, 0)
	if err == unix.ENOENT {
		return nil, errGone
	}
	if err != nil {
		return nil, fmt.Errorf("open segment %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat segment %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("segment %s is not a regular file", path)
	case st.Size == 0:
		return nil, errGone
	case st.Size > maxSegment:
		return nil, fmt.Errorf("segment %s: %d bytes is over the %d limit", path, st.Size, int64(maxSegment))
	}
	data := make([]byte, st.Size)
	for off := 0; off < len(data); {
		n, err := unix.Pread(fd, data[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read segment %s: %w", path, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("read segment %s: %w: ends at %d of %d bytes", path, ErrCorrupt, off, len(data))
		}
		off += n
	}
	return data, nil
}

// remove unlinks path and reports whether it existed.
func remove(path string) (bool, error) {
	err := unix.Unlink(path)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("unlink %s: %w", path, err)
	}
	return true, nil
}

// exists reports whether path names anything; errors other than absence
// count as present, so a sweep never forgets a key it cannot check.
func exists(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) != unix.ENOENT
}

// segmentAt returns the identity of the file at path, errGone when there is
// none, or another error when it cannot tell.
func segmentAt(path string) (fileID, error) {
	var st unix.Stat_t
	switch err := unix.Lstat(path, &st); err {
	case nil:
		return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
	case unix.ENOENT:
		return fileID{}, errGone
	default:
		return fileID{}, fmt.Errorf("stat segment %s: %w", path, err)
	}
}

// oldLockFile is what the orphan check needs to know about a lock file.
type oldLockFile struct {
	dev, ino uint64
	ok       bool
}

// inspectLock reports whether st describes a lock file that may be an
// orphan: a regular file of uid, last changed before cutoff.
func inspectLock(st *unix.Stat_t, uid int, cutoff time.Time) oldLockFile {
	mtime := time.Unix(st.Mtim.Unix())
	ok := st.Mode&unix.S_IFMT == unix.S_IFREG && int(st.Uid) == uid && mtime.Before(cutoff)
	return oldLockFile{dev: uint64(st.Dev), ino: st.Ino, ok: ok}
}

// sweepLock removes the lock file at lockPath when it is an orphan (SPEC §6):
// checked, locked without waiting, checked again (same inode, own uid, still
// old, segment still absent), then unlinked while the lock is held.
func sweepLock(lockPath, segPath string, uid int, cutoff time.Time) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(lockPath, &st); err != nil {
		return false, nil // gone already, or not ours to judge
	}
	before := inspectLock(&st, uid, cutoff)
	if !before.ok || exists(segPath) {
		return false, nil
	}
	fd, err := unix.Open(lockPath, unix.O_RDWR|unix.O_NONBLOCK|openFlags, 0)
	if err != nil {
		return false, nil
	}
	defer unix.Close(fd)
	if err := flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // in use: a producer or receiver is working on it
	}
	var held, now unix.Stat_t
	if unix.Fstat(fd, &held) != nil || unix.Lstat(lockPath, &now) != nil {
		return false, nil
	}
	after := inspectLock(&held, uid, cutoff)
	if !after.ok || after != before || now.Ino != held.Ino || now.Dev != held.Dev || exists(segPath) {
		return false, nil
	}
	return remove(lockPath)
}

func closeFD(fd int) { unix.Close(fd) }
