package demo

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// peer watches another process for death: through a pidfd, which becomes
// readable when it exits, or, on kernels without one, by comparing its
// start time (field 22 of /proc/PID/stat), so a reused pid is not mistaken
// for it.
type peer struct {
	pid   int
	fd    int // pidfd, or -1
	start string
}

func watchPeer(pid int) (*peer, error) {
	p := &peer{pid: pid, fd: -1}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		p.fd = fd
	case errors.Is(err, unix.ESRCH):
		return p, nil // already gone: alive reports false
	default:
		if p.start, err = startTime(pid); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *peer) alive() bool {
	if p.fd >= 0 {
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err != nil || n == 0
	}
	if p.start == "" {
		return false
	}
	s, err := startTime(p.pid)
	return err == nil && s == p.start
}

func (p *peer) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// startTime is field 22 of /proc/PID/stat (after the parenthesised name,
// which may itself contain spaces and parentheses).
func startTime(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return "", errors.New("short /proc stat")
	}
	return f[19], nil
}
