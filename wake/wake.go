//go:build linux

// Package wake implements the wakeup FIFOs of SPEC §8: a receiver owns a FIFO
// W/{stage}_{uuid4 hex} in the scope's wake directory W (scope.Names.WakeDir)
// and counts the zero bytes written to it; after each put a producer writes
// one zero byte, non-blocking, to every FIFO of the destination stage.
// Wakeups are hints: a receiver that polls stays correct without them.
//
// A Receiver and a Notifier interoperate with the Python connector in both
// directions: they use the same names, modes and one-byte messages.
//
// Receiver and Notifier are Linux-only (by build tag): FIFOs in /dev/shm
// and inotify (through package fswatch) are Linux's. A Receiver reads its
// FIFO through Go's runtime poller, so its waiters hold no OS thread. The constants
// and Enabled build everywhere.
package wake

import (
	"errors"
	"os"
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
