package ring

import (
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// This file is the registry of SPEC §7: the ring directory whose markers
// name the live rings of a scope, and whose stamp receivers cache.

// Replaceable in tests (export_test.go): the stamp write so a denied stamp
// can be simulated, and the clock so the stamp's "previous + 1 ns" rule is
// visible (SPEC §7).
var (
	setStamp = stampDir
	nowNanos = func() int64 { return time.Now().UnixNano() }
)

// localRegistryGen counts the registry changes made by this process, so
// its own Transports see each other's new rings without waiting for the
// inotify watch (the Python receiver sees them at once through the stamp).
var localRegistryGen atomic.Uint64

// UpdateRegistry makes one registry change (SPEC §7) in the ring directory
// dir: it takes flock on dir, notes its mtime, calls change with a
// descriptor of dir (for unlinkat, openat), then sets the mtime to
// max(previous + 1 ns, now). Directory mtimes can coincide within a clock
// tick and receivers cache discovery on this stamp, so it must change
// strictly. If change fails the stamp is left alone and change's error is
// returned as it is; the other errors name the operation and dir (a
// missing dir wraps unix.ENOENT). Every marker create or remove, by a
// producer, a receiver pruning or a sweeper, goes through it.
func UpdateRegistry(dir string, change func(dirfd int) error) error {
	return updateRegistry(dir, nil, change)
}

// updateRegistry is UpdateRegistry counting its flock in c (nil: not
// counted).
func updateRegistry(dir string, c *counters, change func(dirfd int) error) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ring: open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := c.flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("ring: lock %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("ring: stat %s: %w", dir, err)
	}
	previous := st.Mtim.Nano()
	if err := change(fd); err != nil {
		return err
	}
	localRegistryGen.Add(1)
	if err := setStamp(fd, max(previous+1, nowNanos())); err != nil {
		return fmt.Errorf("ring: stamp %s: %w", dir, err)
	}
	return nil
}

// stampDir sets a directory's atime and mtime to ns through its fd
// (futimens), as Python's os.utime(fd, ns=...) does.
func stampDir(fd int, ns int64) error {
	ts := []unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
	err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
	if err == unix.EINVAL || err == unix.ENOENT { // kernels without AT_EMPTY_PATH here
		err = unix.UtimesNano(fmt.Sprintf("/proc/self/fd/%d", fd), ts)
	}
	return err
}

// dirStamp is what a receiver caches per edge (SPEC §7).
type dirStamp struct {
	dev, ino uint64
	mtime    int64
}

func stampOf(st *unix.Stat_t) dirStamp {
	return dirStamp{dev: uint64(st.Dev), ino: st.Ino, mtime: st.Mtim.Nano()}
}
