package bench

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// readUDS reads one length-prefixed message of len(buf) bytes.
func readUDS(sock *os.File, buf []byte) error {
	var hdr [8]byte
	if _, err := io.ReadFull(sock, hdr[:]); err != nil {
		return err
	}
	if n := binary.LittleEndian.Uint64(hdr[:]); n != uint64(len(buf)) {
		return fmt.Errorf("uds message of %d bytes, want %d", n, len(buf))
	}
	_, err := io.ReadFull(sock, buf)
	return err
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
	buf  []byte
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
			err := readUDS(l.r, buf)
			l.done <- err
			if err != nil {
				return
			}
		}
	}()
	return l, nil
}

func (l *udsLoop) roundTrip(b []byte) error {
	l.buf = binary.LittleEndian.AppendUint64(l.buf[:0], uint64(len(b)))
	l.buf = append(l.buf, b...)
	if _, err := l.w.Write(l.buf); err != nil {
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
