package ring

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"omnishm/proc"
)

// This file is the thin I/O layer around layout.go: it creates, maps,
// locks and stamps files; frame arithmetic stays in the pure core.

var (
	// errBusy: another process holds a lock we only try (LOCK_NB); a miss.
	errBusy = errors.New("ring: lock busy")
	// errGone: the ring file no longer exists; its marker is stale.
	errGone = errors.New("ring: ring file gone")
	// errDead: the ring's producer is proven gone (exited, or its pid now
	// names a process with another start time).
	errDead = errors.New("ring: producer gone")
)

// Replaceable in tests (export_test.go): fallocate so a full /dev/shm can
// be simulated.
var fallocate = unix.Fallocate

// countFlocks turns on counters.flocks (export_test.go).
var countFlocks = false

// counters are observed by tests to prove that an empty poll takes no lock,
// scans no directory and stats nothing. A nil *counters counts nothing.
// flocks is counted only where countFlocks is on (the package's tests): a
// put+get pair makes four flock calls, and an atomic add each was a
// measurable part of the pair's CPU beyond them.
type counters struct {
	flocks, dirScans, dirStats, livenessChecks atomic.Int64
	attaches                                   atomic.Int64  // ring files opened to attach
	busy                                       atomic.Uint64 // receives that met a lock another process held
}

// fileID is what stat says of a ring file and its marker: a ring rejected
// as corrupt is not attached again until one of them changes.
type fileID struct {
	dev, ino, size, mtime, ctime uint64
	marker                       uint64 // the marker's inode, 0 if none
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{dev: st.Dev, ino: st.Ino, size: uint64(st.Size),
		mtime: uint64(st.Mtim.Nano()), ctime: uint64(st.Ctim.Nano())}
}

// lockTries bounds the non-blocking tries of a blocking LOCK_EX: about as
// long as a receiver's copy of a small frame.
const lockTries = 32

// flock takes or releases the ring lock, one system call when nobody else
// holds it. An unlock and a non-blocking try never block, so they skip the
// scheduler's bookkeeping for a call that may block (entersyscall and
// exitsyscall cost about as much as an uncontended flock itself); a
// blocking LOCK_EX tries without waiting first and blocks, as a system call
// the scheduler knows of, only on contention. On contention it first tries
// again a few times, yielding in between: a receiver holds the lock for one
// frame's copy, a few microseconds, and a producer asleep in flock costs
// both sides a context switch (the receiver's unlock wakes it).
func (c *counters) flock(fd, how int) error {
	if countFlocks && c != nil {
		c.flocks.Add(1)
	}
	if how == unix.LOCK_EX {
		for i := range lockTries {
			if err := rawFlock(fd, unix.LOCK_EX|unix.LOCK_NB); err != unix.EWOULDBLOCK {
				return err
			}
			if i+1 < lockTries {
				runtime.Gosched()
			}
		}
		for {
			if err := unix.Flock(fd, how); err != unix.EINTR {
				return err
			}
		}
	}
	if err := rawFlock(fd, how); err != unix.EWOULDBLOCK {
		return err
	}
	return errBusy
}

// rawFlock is flock(2) for calls that cannot block; it retries EINTR.
func rawFlock(fd, how int) error {
	for {
		_, _, errno := unix.RawSyscall(unix.SYS_FLOCK, uintptr(fd), uintptr(how), 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}

// mapping is one ring file mapped shared, read-write.
type mapping struct {
	fd       int
	mem      []byte // whole file: header + data
	data     []byte // mem[HeaderSize:], len == capacity
	capacity uint64
}

// The header words are read without the lock on the miss path (SPEC §3
// "a miss must be cheap"), so every access is atomic; mmap is page
// aligned, so offsets 16 and 24 are 8-aligned.
func (m *mapping) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&m.mem[off]))
}
func (m *mapping) head() uint64     { return m.word(offHead).Load() }
func (m *mapping) tail() uint64     { return m.word(offTail).Load() }
func (m *mapping) setHead(v uint64) { m.word(offHead).Store(v) }
func (m *mapping) setTail(v uint64) { m.word(offTail).Store(v) }

func (m *mapping) close() {
	if m.mem != nil {
		unix.Munmap(m.mem)
		m.mem, m.data = nil, nil
	}
	if m.fd >= 0 {
		unix.Close(m.fd)
		m.fd = -1
	}
}

// createRing makes a producer's ring file (SPEC §3): exclusive, 0600,
// fully allocated (so a full /dev/shm fails here and not with SIGBUS on a
// later put), mapped and zero-filled once, header written under the lock.
// created is called once the file exists; removed after it is unlinked on
// failure.
func createRing(path string, capacity uint64, creator proc.ID, c *counters, created, removed func(string)) (_ *mapping, err error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ring: create %s: %w", path, err)
	}
	created(path)
	m := &mapping{fd: fd, capacity: capacity}
	defer func() {
		if err != nil {
			m.close()
			unix.Unlink(path)
			removed(path)
		}
	}()
	size := int64(HeaderSize + capacity)
	if err := unix.Ftruncate(fd, size); err != nil {
		return nil, fmt.Errorf("ring: size %s: %w", path, err)
	}
	if err := c.flock(fd, unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("ring: lock %s: %w", path, err)
	}
	defer c.flock(fd, unix.LOCK_UN)
	if err := fallocate(fd, 0, 0, size); err != nil {
		return nil, fmt.Errorf("ring: allocate %s: %w", path, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ring: map %s: %w", path, err)
	}
	m.mem, m.data = mem, mem[HeaderSize:]
	clear(mem) // fault every page once per edge, outside the put path
	encodeHeader(mem, Header{Capacity: capacity, CreatorPID: uint64(creator.PID), CreatorStart: creator.Start})
	return m, nil
}

// attachRing maps another process's ring and validates its header under a
// brief non-blocking lock (SPEC §7 attach). errGone if the file is absent,
// errBusy on contention, ErrCorrupt or ErrNotInitialized for a bad header
// (then id is the file's, for the caller to remember).
func attachRing(path string, c *counters) (_ *mapping, h Header, id fileID, err error) {
	c.attaches.Add(1)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil, h, id, errGone
		}
		if err == unix.EACCES || err == unix.EPERM {
			// Another user's file at a ring's name: rejected, and remembered
			// as it is, not tried again on every get.
			var st unix.Stat_t
			if unix.Lstat(path, &st) == nil {
				id = idOf(&st)
			}
			return nil, h, id, fmt.Errorf("ring: attach %s: %w: not a ring file of this user (%w)", path, ErrCorrupt, err)
		}
		return nil, h, id, fmt.Errorf("ring: open %s: %w", path, err)
	}
	m := &mapping{fd: fd}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if err := c.flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, h, id, err
	}
	defer c.flock(fd, unix.LOCK_UN)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, h, id, fmt.Errorf("ring: stat %s: %w", path, err)
	}
	id = idOf(&st)
	// Only regular files of this uid: /dev/shm is world-writable, and a
	// descriptor's name could point at a file another user planted.
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != unix.Getuid() ||
		st.Size < HeaderSize || st.Size > HeaderSize+MaxCapacity {
		return nil, h, id, fmt.Errorf("ring: attach %s: %w: not a ring file of this user (%d bytes)", path, ErrCorrupt, st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, h, id, fmt.Errorf("ring: map %s: %w", path, err)
	}
	m.mem, m.data = mem, mem[HeaderSize:]
	h, err = decodeHeader(mem)
	if err != nil {
		return nil, h, id, fmt.Errorf("ring: attach %s: %w", path, err)
	}
	m.capacity = h.Capacity
	return m, h, id, nil
}
