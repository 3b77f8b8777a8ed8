package wake

import "golang.org/x/sys/unix"

// signal is a waiter's private wakeup: an eventfd whose readiness nobody
// but its waiter consumes.
type signal struct{ fd int }

func newSignal() (signal, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	return signal{fd}, err
}

// pollFD is the descriptor to poll for readability.
func (s signal) pollFD() int { return s.fd }

var one = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// raise makes the signal readable, without blocking.
func (s signal) raise() { unix.Write(s.fd, one) }

// clear consumes a pending raise, without blocking.
func (s signal) clear() {
	var b [8]byte
	unix.Read(s.fd, b[:])
}

func (s signal) close() { unix.Close(s.fd) }
