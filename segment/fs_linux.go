package segment

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// This file is the I/O edge of the package: every system call on a segment
// or lock file. Errors name the system call's file once, as *fs.PathError;
// the exported functions add the operation ("segment: put: ...").

// Every open of a path in the shared directory refuses symlinks (another
// user can plant one in sticky /dev/shm) and does not leak into children.
const openFlags = unix.O_NOFOLLOW | unix.O_CLOEXEC

// lockTries bounds how often a producer reopens a lock file that a receiver
// removed between open and flock (SPEC §6: up to 3 tries).
const lockTries = 3

// lockFile opens the lock file at path and takes its exclusive flock. A
// producer (wait) creates it 0600, blocks on the lock and reopens when the
// locked file is no longer the one at path. A receiver or a sweep (!wait)
// never creates, never blocks, and treats absence, contention or a replaced
// file as "not now" (errGone, errBusy, errReplaced). It returns what fstat
// says of the locked file; the caller closes fd, which releases the lock.
func lockFile(path string, wait bool) (int, fileInfo, error) {
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
		switch {
		case err == unix.ENOENT && !wait:
			return -1, fileInfo{}, errGone
		case err == unix.ELOOP:
			return -1, fileInfo{}, pathError("open", path, fmt.Errorf("%w: a symlink", ErrUnsafe))
		case err == unix.EACCES || err == unix.EPERM:
			return -1, fileInfo{}, pathError("open", path, denied(err))
		case err != nil:
			return -1, fileInfo{}, pathError("open", path, err)
		}
		if err := flock(fd, how); err != nil {
			unix.Close(fd)
			if err == unix.EWOULDBLOCK {
				return -1, fileInfo{}, errBusy
			}
			return -1, fileInfo{}, pathError("lock", path, err)
		}
		info, same, err := isFileAt(fd, path)
		if same {
			return fd, info, nil
		}
		unix.Close(fd)
		if err != nil {
			return -1, fileInfo{}, err
		}
		if !wait {
			return -1, fileInfo{}, errReplaced
		}
	}
	return -1, fileInfo{}, pathError("lock", path, fmt.Errorf("replaced %d times while locking", lockTries))
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
// receiver may have unlinked the lock file between our open and flock), and
// what fstat says of fd.
func isFileAt(fd int, path string) (fileInfo, bool, error) {
	var have unix.Stat_t
	if err := unix.Fstat(fd, &have); err != nil {
		return fileInfo{}, false, pathError("stat", path, err)
	}
	info := infoOf(&have)
	if !info.regular {
		return info, false, pathError("lock", path, errNotRegular)
	}
	now, err := lstatFile(path)
	switch {
	case err == errGone:
		return info, false, nil
	case err != nil:
		return info, false, err
	}
	return info, now.id == info.id, nil
}

// writeSegment creates the segment at path holding exactly the size bytes
// of parts, as Python's SharedMemory(create=True) does (O_CREAT|O_EXCL,
// 0600, sized; see fill). An existing segment is unlinked first: the caller
// holds the key's lock, and receivers read only under it, so no one is
// reading the old one. It reports whether an old segment was replaced, and
// the new one's identity, taken from the file it created (not from the
// name, which a receiver may already have claimed and another producer
// re-created). created is called once the file exists, before it is sized
// or written: a producer killed from then on leaves a file its watchdog
// knows.
func writeSegment(path string, size int, parts [][]byte, created func()) (replaced bool, id fileID, err error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|openFlags, 0o600)
	if err == unix.EEXIST {
		// Only a file of ours is an unclaimed publication to replace: as
		// root, unlink would remove any user's file of that name.
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && int(st.Uid) != unix.Geteuid() {
			return false, id, pathError("replace", path, fmt.Errorf("it belongs to uid %d", st.Uid))
		}
		if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
			return false, id, pathError("replace", path, err)
		}
		replaced = true
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|openFlags, 0o600)
	}
	if err != nil {
		return replaced, id, pathError("create", path, err)
	}
	var st unix.Stat_t
	if err = unix.Fstat(fd, &st); err == nil {
		id = infoOf(&st).id
		created()
		err = fill(fd, size, parts)
	}
	unix.Close(fd)
	if err != nil {
		unix.Unlink(path) // a half-written segment must not be claimed
		return replaced, fileID{}, pathError("write", path, err)
	}
	return replaced, id, nil
}

// maxIOV is the most parts one pwritev takes (Linux's IOV_MAX).
const maxIOV = 1024

// fill sizes the new file and writes parts from offset 0, straight from
// the caller's memory into the file's pages (pwritev: one copy per byte).
// fallocate sizes it as ftruncate would and allocates its pages in one
// pass, so the write copies into pages that exist: measured on tmpfs, 1 MiB
// put+get cost 8-17% less CPU than ftruncate's (a mapping would fault
// each page in, and pay an munmap). ftruncate where fallocate is not
// supported.
func fill(fd, size int, parts [][]byte) error {
	// tmpfs's fallocate returns EINTR on a pending signal (no SA_RESTART
	// for it); pages it allocated stay, so a retry goes on from there.
	err := unix.Fallocate(fd, 0, 0, int64(size))
	for err == unix.EINTR {
		err = unix.Fallocate(fd, 0, 0, int64(size))
	}
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		err = unix.Ftruncate(fd, int64(size))
	}
	if err != nil {
		return err
	}
	off := 0
	for len(parts) > 0 {
		if len(parts[0]) == 0 {
			parts = parts[1:]
			continue
		}
		n, err := unix.Pwritev(fd, parts[:min(len(parts), maxIOV)], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("pwritev wrote nothing at %d of %d bytes", off, size)
		}
		off += n
		// Drop what was written: whole parts, then the front of the next.
		for n > 0 && len(parts) > 0 {
			if n < len(parts[0]) {
				parts[0] = parts[0][n:]
				break
			}
			n -= len(parts[0])
			parts = parts[1:]
		}
	}
	return nil
}

// maxSegment bounds what a receiver allocates for one segment, so a
// corrupt or hostile size is an error, not a runtime panic.
const maxSegment = 1 << 40

// segmentSize is the miss path's only system call: the segment's size, or
// errGone when it is absent or empty (a producer has not sized it yet).
// A symlink, a non-regular file or another user's file is ErrUnsafe.
func segmentSize(path string) (int64, error) {
	info, err := lstatFile(path)
	switch {
	case err != nil:
		return 0, err
	case !info.regular:
		return 0, pathError("stat", path, errNotRegular)
	case info.uid != unix.Geteuid():
		return 0, pathError("stat", path, foreign(info.uid))
	case info.size == 0:
		return 0, errGone
	}
	return info.size, nil
}

// readSegment copies the whole segment at path into memory the caller owns:
// alloc's (nil: a new slice). An alloc error stops it before anything is
// read. The caller holds the key's lock.
func readSegment(path string, alloc func(n int) ([]byte, error)) ([]byte, error) {
	// O_NONBLOCK: a FIFO planted at the name must not block the open.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|openFlags, 0)
	switch {
	case err == unix.ENOENT:
		return nil, errGone
	case err == unix.ELOOP:
		return nil, pathError("open", path, fmt.Errorf("%w: a symlink", ErrUnsafe))
	case err == unix.EACCES || err == unix.EPERM:
		return nil, pathError("open", path, denied(err))
	case err != nil:
		return nil, pathError("open", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, pathError("stat", path, err)
	}
	// Checked again on the open file: the name may have changed since the
	// stat.
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, pathError("read", path, errNotRegular)
	case int(st.Uid) != unix.Geteuid():
		return nil, pathError("read", path, foreign(int(st.Uid)))
	case st.Size == 0:
		return nil, errGone
	case st.Size > maxSegment:
		return nil, pathError("read", path, fmt.Errorf("%d bytes is over the %d limit", st.Size, int64(maxSegment)))
	}
	var data []byte
	if alloc == nil {
		data = make([]byte, st.Size)
	} else if data, err = alloc(int(st.Size)); err != nil {
		return nil, pathError("read", path, err)
	} else if len(data) != int(st.Size) {
		return nil, pathError("read", path, fmt.Errorf("the allocator gave %d bytes for a %d-byte segment", len(data), st.Size))
	}
	for off := 0; off < len(data); {
		n, err := unix.Pread(fd, data[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, pathError("read", path, err)
		}
		if n == 0 {
			return nil, pathError("read", path, fmt.Errorf("%w: ends at %d of %d bytes", ErrCorrupt, off, len(data)))
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
		return false, pathError("unlink", path, err)
	}
	return true, nil
}

// lstatFile describes the file at path without following a link: errGone
// when there is none, another error when it cannot tell.
func lstatFile(path string) (fileInfo, error) {
	var st unix.Stat_t
	switch err := unix.Lstat(path, &st); err {
	case nil:
		return infoOf(&st), nil
	case unix.ENOENT:
		return fileInfo{}, errGone
	default:
		return fileInfo{}, pathError("stat", path, err)
	}
}

func infoOf(st *unix.Stat_t) fileInfo {
	return fileInfo{
		id:      fileID{dev: uint64(st.Dev), ino: st.Ino},
		regular: st.Mode&unix.S_IFMT == unix.S_IFREG,
		uid:     int(st.Uid),
		size:    st.Size,
		mtime:   time.Unix(st.Mtim.Unix()),
	}
}

func closeFD(fd int) { unix.Close(fd) }
