// Package wake implements the wakeup FIFOs of SPEC §8: a receiver owns a FIFO
// W/{stage}_{uuid4 hex} in the scope's wake directory W (scope.Names.WakeDir)
// and counts the zero bytes written to it; after each put a producer writes
// one zero byte, non-blocking, to every FIFO of the destination stage.
// Wakeups are hints: a receiver that polls stays correct without them.
//
// A Receiver and a Notifier interoperate with the Python connector in both
// directions: they use the same names, modes and one-byte messages.
package wake

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"time"
)

// EnvWakeup is the environment variable that disables wakeups when it is "0"
// (SPEC §8).
const EnvWakeup = "VLLM_OMNI_SHM_WAKEUP"

var (
	// ErrDisabled is returned by OpenReceiver when wakeups are disabled.
	ErrDisabled = errors.New("wake: wakeups disabled by " + EnvWakeup + "=0")
	// ErrStage is returned for a stage id that is not a string of digits:
	// only numeric stages use wakeups (SPEC §8).
	ErrStage = errors.New("wake: stage id is not numeric")
	// ErrUnsafeDir is returned when the wake directory is not a directory
	// owned by this user and closed to others (a symlink, another user's
	// directory, or one that others may write to).
	ErrUnsafeDir = errors.New("wake: unsafe wake directory")
	// ErrClosed is returned by Wait on a closed Receiver.
	ErrClosed = errors.New("wake: receiver closed")
)

// Enabled reports whether wakeups are enabled: they are unless the
// environment sets VLLM_OMNI_SHM_WAKEUP=0.
func Enabled() bool { return os.Getenv(EnvWakeup) != "0" }

const (
	dirMode  = 0o700
	fifoMode = 0o600
)

// matchesStage reports whether a wake-directory entry is a FIFO name of
// stage: the Python producer's pattern is the glob "{stage}_*", so "1_x"
// belongs to stage 1 and "12_x" does not.
func matchesStage(name, stage string) bool {
	return len(name) > len(stage) && name[len(stage)] == '_' && strings.HasPrefix(name, stage)
}

// uuid4Hex returns a random version-4 UUID in Python's uuid4().hex form.
func uuid4Hex() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:]), nil
}

// fifoName is the final name of a receiver's FIFO (SPEC §8).
func fifoName(stage, id string) string { return stage + "_" + id }

// tempFIFOName is where a receiver creates its FIFO before renaming it into
// place once its read end is open: producers match only "{stage}_*", so they
// never open it while it has no reader (which would fail with ENXIO).
func tempFIFOName(id string) string { return ".tmp_" + id }

// dirStamp identifies a state of the wake directory for the mtime fallback
// of the Notifier's cache.
type dirStamp struct {
	dev, ino uint64
	mtime    int64 // ns since the epoch
}

// racyWindow bounds the granularity of the file-system clock: tmpfs stamps
// mtime with a coarse clock, so an entry created within the same tick as the
// scan that cached the directory would leave the mtime unchanged.
const racyWindow = 50 * time.Millisecond

// racy reports whether a directory mtime is too recent to prove that nothing
// changed after a scan made now (the "racy git" problem).
func racy(mtime int64, now time.Time) bool {
	return now.UnixNano()-mtime < int64(racyWindow)
}

// retryWindow is how long a Notifier keeps retrying a FIFO that had no
// reader when it was found: a receiver creates its FIFO and then opens it, so
// for a moment the FIFO exists without a reader. A FIFO left behind by a
// crashed receiver stops costing an open per notify after this window.
const retryWindow = 2 * time.Second
