package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// Info is what Inspect reads from a ring file.
type Info struct {
	Path   string
	Busy   bool // another process held the ring lock; nothing else was read
	Header Header
	Frames []FrameInfo // tail to head
	Alive  bool        // the creator pid runs with the creator start time
}

// Inspect reads a ring file for tools. It takes the ring lock only with
// LOCK_NB and reports Busy rather than waiting; it never writes. The
// returned Info owns its memory.
func Inspect(path string) (Info, error) {
	info := Info{Path: path}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return info, fmt.Errorf("ring: inspect %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if err == unix.EWOULDBLOCK {
			info.Busy = true
			return info, nil
		}
		return info, fmt.Errorf("ring: lock %s: %w", path, err)
	}
	file, err := readWhole(fd, headerSize+MaxCapacity)
	unix.Flock(fd, unix.LOCK_UN)
	if err != nil {
		return info, fmt.Errorf("ring: read %s: %w", path, err)
	}
	info.Header, info.Frames, err = Parse(file)
	info.Alive = Alive(int(min(info.Header.CreatorPID, 1<<31)), info.Header.CreatorStart)
	if err != nil {
		return info, fmt.Errorf("ring: %s: %w", path, err)
	}
	return info, nil
}

func readWhole(fd int, limit int64) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size > limit {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, st.Size)
	}
	b := make([]byte, st.Size)
	for off := 0; off < len(b); {
		n, err := unix.Pread(fd, b[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return b[:off], nil
		}
		off += n
	}
	return b, nil
}

// producerOf reads a ring file's creator without locking (pid and start
// never change after the header is written); ok=false if the file is
// absent or its header is not (yet) valid.
func producerOf(path string) (pid int, start uint64, ok bool, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, false, err
	}
	defer unix.Close(fd)
	var b [headerSize]byte
	if n, err := unix.Pread(fd, b[:], 0); err != nil || n < headerSize || [8]byte(b[:8]) != magic {
		return 0, 0, false, nil
	}
	le := binary.LittleEndian
	return int(min(le.Uint64(b[offCreatorPID:]), 1<<31)), le.Uint64(b[offCreatorStart:]), true, nil
}

// Prune removes what crashed producers of a scope left: markers whose ring
// file is gone, and the rings (with their markers) of producers proven
// dead by their start time. Live producers' files and rings still being
// initialised are kept. It returns the paths removed.
func Prune(names scope.Names) ([]string, error) {
	var removed []string
	var stats counters
	uid := os.Getuid()
	dir := names.RingDir()
	markers, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("ring: list %s: %w", dir, err)
	}
	marked := map[string]bool{}
	for _, e := range markers {
		name := e.Name()
		if !scope.ValidRingName(uid, name) || !strings.HasPrefix(name, names.RingPrefix()) {
			continue
		}
		marked[name] = true
		ring := scope.Path(name)
		pid, start, ok, err := producerOf(ring)
		gone := errors.Is(err, unix.ENOENT)
		dead := ok && !Alive(pid, start)
		if !gone && !dead {
			continue
		}
		if dead && unix.Unlink(ring) == nil {
			removed = append(removed, ring)
		}
		err = registryUpdate(dir, &stats, func(dirfd int) error { return unix.Unlinkat(dirfd, name, 0) })
		if err == nil {
			removed = append(removed, dir+"/"+name)
		} else if !errors.Is(err, unix.ENOENT) {
			return removed, err
		}
	}
	entries, err := os.ReadDir(scope.ShmDir)
	if err != nil {
		return removed, fmt.Errorf("ring: list %s: %w", scope.ShmDir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if marked[name] || !strings.HasPrefix(name, names.RingPrefix()) || !scope.ValidRingName(uid, name) {
			continue
		}
		ring := scope.Path(name)
		if pid, start, ok, _ := producerOf(ring); ok && !Alive(pid, start) && unix.Unlink(ring) == nil {
			removed = append(removed, ring)
		}
	}
	if len(removed) > 0 {
		unix.Rmdir(dir) // only if now empty
	}
	return removed, nil
}
