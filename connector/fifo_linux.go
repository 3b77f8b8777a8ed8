package connector

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// receiverFIFOs lists the wake FIFOs in dir (SPEC §8) that this process
// holds open for reading: its receivers' own. Producers open other
// receivers' FIFOs only for writing, so none of those is listed.
//
// TODO(wake): ask wake.Receiver for the path of the FIFO it made once the
// wake package says it; this reads it back from /proc/self/fd meanwhile.
func receiverFIFOs(dir string) []string {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var fifos []string
	for _, fd := range fds {
		target, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err != nil || filepath.Dir(target) != dir {
			continue
		}
		if _, ok := scope.FIFOStage(filepath.Base(target)); !ok {
			continue // " (deleted)", or not a FIFO name
		}
		if info, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name()); err == nil && readOnly(info) {
			fifos = append(fifos, target)
		}
	}
	return fifos
}

// readOnly reports whether a /proc/self/fdinfo text says the descriptor was
// opened for reading only.
func readOnly(fdinfo []byte) bool {
	for line := range bytes.Lines(fdinfo) {
		if v, ok := bytes.CutPrefix(line, []byte("flags:")); ok {
			flags, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 8, 64)
			return err == nil && flags&unix.O_ACCMODE == unix.O_RDONLY
		}
	}
	return false
}
