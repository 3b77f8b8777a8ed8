package ring

import (
	"fmt"

	"golang.org/x/sys/unix"

	"omnishm/proc"
)

// Info is what Inspect reads from a ring file. It owns its memory.
type Info struct {
	Path string
	// Header is the file's header: its identity (capacity, creator) once
	// written; head and tail as read under the lock, or an unlocked snapshot
	// when Busy.
	Header Header
	// Producer is the creator's liveness now (SPEC §7): Unknown when /proc
	// cannot tell, which must never count as dead.
	Producer proc.Liveness
	// Busy: another process held the ring lock, so Frames were not read
	// (Inspect never waits on it).
	Busy   bool
	Frames []FrameInfo // tail to head
}

// Inspect reads a ring file's state for tools, the one reader of it
// outside a Transport: the header's identity without the lock (it never
// changes once written), the creator's liveness, and, under the ring lock
// taken only with LOCK_NB, the frames. It never writes and never waits.
// The error wraps ErrNotInitialized for a header not written yet and
// ErrCorrupt for bytes that break SPEC §3 (with what was read before them
// in Info); it names the file once.
func Inspect(path string) (Info, error) { return inspect(path, true) }

// InspectHeader is Inspect without the frames: the header and the
// creator's liveness, read without any lock, so that a tool that only
// counts rings never makes a receiver's non-blocking lock miss (SPEC §3)
// nor delays a producer. Busy is always false and Frames empty.
func InspectHeader(path string) (Info, error) { return inspect(path, false) }

func inspect(path string, frames bool) (Info, error) {
	info := Info{Path: path}
	fail := func(err error) (Info, error) { return info, fmt.Errorf("ring: inspect %s: %w", path, err) }
	// O_NONBLOCK: a FIFO planted under a ring's name must not hang us.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > HeaderSize+MaxCapacity {
		return fail(fmt.Errorf("%w: not a ring file (mode %#o, %d bytes)", ErrCorrupt, st.Mode, st.Size))
	}
	var hdr [HeaderSize]byte
	n, err := pread(fd, hdr[:], 0)
	if err != nil {
		return fail(err)
	}
	if info.Header, err = ReadHeader(hdr[:n]); err != nil {
		return fail(err)
	}
	info.Producer = proc.Check(info.Header.Creator())
	if !frames {
		return info, nil
	}
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if err == unix.EWOULDBLOCK {
			info.Busy = true
			return info, nil
		}
		return fail(fmt.Errorf("lock: %w", err))
	}
	file := make([]byte, st.Size)
	n, err = readUsed(fd, file)
	unix.Flock(fd, unix.LOCK_UN)
	if err != nil {
		return fail(err)
	}
	if info.Header, info.Frames, err = Parse(file[:n]); err != nil {
		return fail(err)
	}
	return info, nil
}

// readUsed fills file, the size of the whole file, with the header and the
// bytes from tail to head, the only ones Parse reads: under the ring lock
// a copy of what is in use, not of the whole buffer (a 64 MiB ring's lock
// was held while all of it was copied). A header that does not describe
// the file sound enough for that has the whole file read, for Parse to
// judge. It returns how much of file holds the file.
func readUsed(fd int, file []byte) (int, error) {
	n, err := pread(fd, file[:min(HeaderSize, len(file))], 0)
	if err != nil || n < HeaderSize {
		return n, err
	}
	h, err := ReadHeader(file[:HeaderSize])
	if err != nil || h.Capacity == 0 || uint64(len(file)) != HeaderSize+h.Capacity || h.Head < h.Tail || h.Head-h.Tail > h.Capacity {
		return pread(fd, file, 0)
	}
	for pos := h.Tail; pos < h.Head; { // at most two pieces: one wrap
		off := offsetIn(pos, h.Capacity)
		end := min(h.Capacity, off+(h.Head-pos))
		piece := file[HeaderSize+off : HeaderSize+end]
		if m, err := pread(fd, piece, int64(HeaderSize+off)); err != nil || m < len(piece) {
			return pread(fd, file, 0) // shorter than its header says
		}
		pos += end - off
	}
	return len(file), nil
}

// pread fills b from offset off until it is full or the file ends.
func pread(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pread(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("read: %w", err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}
