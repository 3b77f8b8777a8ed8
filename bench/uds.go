//go:build linux

package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// udsHeader is the uds baseline's framing before a message's bytes: its
// length and its sequence number, little-endian uint64s.
const udsHeader = 16

// udsFrame is one message of the uds baseline as it goes on the socket,
// built once per cell so that no per-message copy is timed: stamp sets the
// sequence number in place.
type udsFrame []byte

func newUDSFrame(form []byte) udsFrame {
	f := make(udsFrame, udsHeader+len(form))
	binary.LittleEndian.PutUint64(f, uint64(len(form)))
	copy(f[udsHeader:], form)
	return f
}

// stamp sets the frame's sequence number and returns its bytes (the
// frame's own memory).
func (f udsFrame) stamp(seq int) []byte {
	binary.LittleEndian.PutUint64(f[8:], uint64(seq))
	return f
}

// readUDS reads one message of len(buf) bytes into buf and returns its
// sequence number.
func readUDS(sock *os.File, buf []byte) (int, error) {
	var hdr [udsHeader]byte
	if _, err := io.ReadFull(sock, hdr[:]); err != nil {
		return 0, err
	}
	if n := binary.LittleEndian.Uint64(hdr[:]); n != uint64(len(buf)) {
		return 0, fmt.Errorf("uds message of %d bytes, want %d", n, len(buf))
	}
	_, err := io.ReadFull(sock, buf)
	return int(binary.LittleEndian.Uint64(hdr[8:])), err
}

// udsPending reports whether bytes wait to be read on sock, without
// reading them or blocking.
func udsPending(sock *os.File) (bool, error) {
	raw, err := sock.SyscallConn()
	if err != nil {
		return false, err
	}
	var n int
	var perr error
	if err := raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, perr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}); err != nil {
		return false, err
	}
	if errors.Is(perr, unix.EAGAIN) {
		return false, nil
	}
	return n > 0, perr
}

// socketpair returns a connected stream socket pair, close-on-exec
// (ExtraFiles hands one end to the receiver explicitly).
func socketpair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fds[0])
		unix.CloseOnExec(fds[1])
	}
	return fds, err
}

// udsLoop is the pair-mode baseline: a socket pair with a reader goroutine,
// since one goroutine cannot write a large message into a socket that
// nobody reads.
type udsLoop struct {
	w, r *os.File
	done chan error
}

func newUDSLoop(size int) (*udsLoop, error) {
	fds, err := socketpair()
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	l := &udsLoop{w: os.NewFile(uintptr(fds[0]), "uds-w"), r: os.NewFile(uintptr(fds[1]), "uds-r"), done: make(chan error)}
	go func() {
		defer close(l.done)
		buf := make([]byte, size)
		for {
			_, err := readUDS(l.r, buf)
			l.done <- err
			if err != nil {
				return
			}
		}
	}()
	return l, nil
}

// roundTrip writes one framed message and waits until it was read.
func (l *udsLoop) roundTrip(frame []byte) error {
	if _, err := l.w.Write(frame); err != nil {
		return err
	}
	return <-l.done
}

func (l *udsLoop) close() {
	l.w.Close()
	for range l.done { // up to the reader's EOF
	}
	l.r.Close()
}
