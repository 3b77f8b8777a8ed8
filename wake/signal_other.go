//go:build !linux

package wake

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// signal is a waiter's private wakeup: a pipe whose readiness nobody but its
// waiter consumes.
type signal struct{ r, w int }

func newSignal() (signal, error) {
	var p [2]int
	// Hold ForkLock so no child inherits the pipe before it is close-on-exec.
	syscall.ForkLock.RLock()
	err := unix.Pipe(p[:])
	if err == nil {
		unix.CloseOnExec(p[0])
		unix.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return signal{}, err
	}
	for _, fd := range p {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return signal{}, err
		}
	}
	return signal{p[0], p[1]}, nil
}

func (s signal) pollFD() int { return s.r }

func (s signal) raise() { unix.Write(s.w, []byte{0}) }

func (s signal) clear() {
	var b [64]byte
	for {
		if n, err := unix.Read(s.r, b[:]); n < len(b) || err != nil {
			return
		}
	}
}

func (s signal) close() {
	unix.Close(s.r)
	unix.Close(s.w)
}
