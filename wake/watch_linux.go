package wake

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// watchMask covers every way a FIFO can appear in or leave the directory,
// and the directory itself going away.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// inotifyWatch watches the wake directory with inotify: an unchanged
// directory costs one read that fails with EAGAIN.
type inotifyWatch struct {
	dir string
	fd  int // non-blocking inotify instance
	wd  int // watch descriptor; -1 while the directory is not watched
	buf [4096]byte
	// stat replaces inotify after a watch could not be added for another
	// reason than a missing directory (such as the watch limit).
	stat *statWatch
}

func newWatcher(dir string) watcher {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return &statWatch{dir: dir}
	}
	return &inotifyWatch{dir: dir, fd: fd, wd: -1}
}

func (w *inotifyWatch) changed() bool {
	if w.stat != nil {
		return w.stat.changed()
	}
	if w.wd < 0 {
		wd, err := unix.InotifyAddWatch(w.fd, w.dir, watchMask)
		switch {
		case err == nil:
			// Watching starts now: whatever happened before needs a scan.
			w.wd = wd
		case err != unix.ENOENT:
			w.stat = &statWatch{dir: w.dir}
			unix.Close(w.fd)
			w.fd = -1
		}
		return true
	}
	changed := false
	for {
		n, err := unix.Read(w.fd, w.buf[:])
		if n <= 0 || err != nil {
			return changed
		}
		changed = true
		if lost(w.buf[:n]) {
			// The directory was removed or renamed: watch the path again.
			unix.InotifyRmWatch(w.fd, uint32(w.wd))
			w.wd = -1
		}
	}
}

// lost reports whether a buffer of inotify events says the watch no longer
// follows the directory at its path.
func lost(events []byte) bool {
	for len(events) >= unix.SizeofInotifyEvent {
		mask := binary.NativeEndian.Uint32(events[4:8])
		size := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(events[12:16]))
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED|unix.IN_Q_OVERFLOW) != 0 {
			return true
		}
		if size > len(events) {
			break
		}
		events = events[size:]
	}
	return false
}

func (w *inotifyWatch) close() {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}
