package main

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// benchClock is CLOCK_MONOTONIC: one clock for every process of the host,
// so a put stamped here and a receive stamped in the receiver compare.
func benchClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// benchChildAttr kills the receiver if the bench process dies first.
func benchChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// benchIsTerminal reports whether f is a terminal (draw a bar) or not
// (print plain lines).
func benchIsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
