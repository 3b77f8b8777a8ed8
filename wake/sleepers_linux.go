package wake

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// sleepers is Go-only state beside a FIFO, so that a Go producer can skip
// the FIFO write of SPEC §8 when nobody would wake from it: the receiver of
// FIFO W/{stage}_{id} counts, in the shared memory of a small file
// W/.sleepers_{stage}_{id} (scope.SleepersName), the goroutines of its that
// are about to sleep, or sleep, on the FIFO. A Go producer that finds the
// file and reads zero there skips the write; one that finds no file (a
// Python receiver, or a Go one that keeps no count) writes as SPEC §8 says.
// Python peers never look at the file: their receivers get every wakeup,
// and a Go receiver still gets every wakeup a Python producer writes.
//
// Why a skipped write loses nothing is a Dekker pair of sequentially
// consistent atomics. The receiver adds one to the count, then checks once
// more for what it waits for, and sleeps only if that check finds nothing;
// after it wakes it subtracts one. A producer publishes (the ring's head, an
// atomic store; a segment's file, followed by a full fence) and then reads
// the count. If it reads zero, its read came before the receiver's add, so
// the publication came before the receiver's check, which finds it. If the
// receiver died between its add and its subtract, the count stays above
// zero: producers write, and the first write that meets no reader (EPIPE)
// drops the FIFO, as without the file.
//
// The file is sleepersSize bytes: the magic "OMSHSLP1", then the count, a
// native-endian uint32 at offset 8 (the processes share one host), then
// zeros. A receiver creates it, 0600, before it publishes its FIFO under the
// stage's name, so a producer that finds the FIFO finds the file too, and
// removes it after unlinking the FIFO.
type sleepers struct {
	mem []byte
}

const sleepersSize = 64

var sleepersMagic = [8]byte{'O', 'M', 'S', 'H', 'S', 'L', 'P', '1'}

// count is the shared count; mmap is page aligned, so offset 8 is aligned.
func (s *sleepers) count() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[8]))
}

// awake reports that nobody sleeps on the FIFO, nor is about to: a wakeup
// would reach no one. The caller fenced after its publication
// (Notifier.fence).
func (s *sleepers) awake() bool { return s.count().Load() == 0 }

// createSleepers makes the file of the FIFO fifoName in directory dir, for
// its receiver, who must close it and remove it (removeSleepers).
func createSleepers(dir, fifoName string) (*sleepers, error) {
	path := dir + "/" + scope.SleepersName(fifoName)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fifoMode)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, sleepersSize); err != nil {
		unix.Unlink(path)
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, sleepersSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Unlink(path)
		return nil, err
	}
	copy(mem, sleepersMagic[:])
	return &sleepers{mem: mem}, nil
}

// removeSleepers unlinks the file of the FIFO fifoName in dir.
func removeSleepers(dir, fifoName string) error {
	if err := unix.Unlink(dir + "/" + scope.SleepersName(fifoName)); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
}

// openSleepers maps, read-only, the sleepers file at path (relative to
// dirfd) for a producer; nil if there is none, or if it is not one a
// receiver of this user made (the producer then always writes).
func openSleepers(dirfd int, path string) *sleepers {
	fd, err := unix.Openat(dirfd, path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG ||
		int(st.Uid) != unix.Getuid() || st.Size != sleepersSize {
		return nil
	}
	mem, err := unix.Mmap(fd, 0, sleepersSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	if [8]byte(mem) != sleepersMagic {
		unix.Munmap(mem)
		return nil
	}
	return &sleepers{mem: mem}
}

// close unmaps the file; nil is a no-op.
func (s *sleepers) close() {
	if s != nil && s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}
