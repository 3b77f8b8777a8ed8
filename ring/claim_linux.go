package ring

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"omnishm/descriptor"
	"omnishm/scope"
)

// Claimed reports whether the ring publication h is no longer waiting for
// a receiver: its frame is done (claimed, or retired by its producer: a
// newer put of the key, a cancel, Close), or reclaimed (tail past it), or
// the ring file is gone (its producer closed it, which retires every
// frame). SPEC §3 gives claimed and retired frames the same state byte, so
// the two are not told apart.
//
// It reads the file without its lock, a few aligned bytes at a time, so
// polling it never waits on a lock held by another process nor makes a
// receiver's non-blocking lock miss; a frame it reads is trusted only if
// tail was still before it afterwards. The error wraps ErrName for a name
// that is not a ring of this uid, descriptor.ErrBad when h names no frame
// of the ring, ErrCorrupt for a ring that breaks SPEC §3.
func Claimed(h descriptor.RingHandle) (bool, error) {
	if !scope.ValidRingName(os.Getuid(), h.Name) {
		return false, fmt.Errorf("%w: %q", ErrName, h.Name)
	}
	path := scope.Path(h.Name)
	fail := func(err error) (bool, error) {
		return false, fmt.Errorf("ring: claimed %s@%d: %w", path, h.Position, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err == unix.ENOENT {
		return true, nil
	}
	if err != nil {
		return fail(err)
	}
	defer unix.Close(fd)
	var hdr [HeaderSize]byte
	n, err := pread(fd, hdr[:], 0)
	if err != nil {
		return fail(err)
	}
	head, err := ReadHeader(hdr[:n])
	if err != nil {
		return fail(err)
	}
	var fh [frameHeaderSize]byte
	if head.Capacity > 0 && head.Tail <= h.Position && h.Position < head.Head {
		if n, err := pread(fd, fh[:], HeaderSize+int64(offsetIn(h.Position, head.Capacity))); err != nil {
			return fail(err)
		} else if n < len(fh) {
			return fail(fmt.Errorf("%w: file ends before the frame at %d", ErrCorrupt, h.Position))
		}
	}
	// Read tail again: if it had not passed the frame after the frame was
	// read, the producer had not reclaimed it, so those bytes were its own.
	var tail [8]byte
	if n, err := pread(fd, tail[:], offTail); err != nil {
		return fail(err)
	} else if n < len(tail) {
		return fail(fmt.Errorf("%w: short header", ErrCorrupt))
	}
	done, err := claimed(head, max(head.Tail, binary.LittleEndian.Uint64(tail[:])), h.Position, h.Size, fh[:])
	if err != nil {
		return fail(err)
	}
	return done, nil
}

// Claimed is the package's Claimed for the Transport's producer: a
// publication of one of its own rings is read from its mapping, under the
// producer's mutex (its puts alone move tail), with no system call; any
// other from its file (Claimed).
func (t *Transport) Claimed(h descriptor.RingHandle) (bool, error) {
	if p := t.ownRing(h.Name); p != nil {
		if done, ok, err := p.claimed(h); ok {
			return done, err
		}
	}
	return Claimed(h)
}

// claimed is Transport.Claimed on p's mapping; ok=false once p is closed
// (its file then tells: gone, every frame retired).
func (p *producer) claimed(h descriptor.RingHandle) (done, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false, false, nil
	}
	hdr := Header{Capacity: p.m.capacity, Head: p.m.head(), Tail: p.m.tail()}
	var fh []byte
	if hdr.Tail <= h.Position && h.Position < hdr.Head {
		off := offsetIn(h.Position, hdr.Capacity)
		fh = p.m.data[off:min(off+frameHeaderSize, hdr.Capacity)]
	}
	if done, err = claimed(hdr, hdr.Tail, h.Position, h.Size, fh); err != nil {
		return false, true, fmt.Errorf("ring: claimed %s@%d: %w", p.path, h.Position, err)
	}
	return done, true, nil
}
