//go:build !linux

package reexec

import (
	"os"
	"syscall"
)

func selfExe() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}

// sysProcAttr has no parent-death signal here; a child also learns of its
// parent's end from its stdin (end of file).
func sysProcAttr(detach bool) *syscall.SysProcAttr {
	if detach {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return nil
}

// exited cannot look without reaping here; Child.Exited then reports only
// a reaped child.
func exited(int) bool { return false }
