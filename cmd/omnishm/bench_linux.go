package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// benchIsTerminal reports whether f is a terminal (draw a bar) or not
// (print plain lines).
func benchIsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
