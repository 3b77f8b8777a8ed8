//go:build linux

package wake

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// ErrNotSleepers is returned by RemoveSleepers for a file at a sleepers
// file's name that is not one a receiver of this user made; it is left
// alone.
var ErrNotSleepers = errors.New("wake: not a sleepers file of this user")

// RemoveSleepers removes the sleepers file of the wake FIFO fifoName in the
// wake directory dir (W/.sleepers_{fifo}, see scope.SleepersName), for a
// cleanup that knows the FIFO's receiver is gone: its crash watchdog, or
// prune. Only a regular file of this user with the sleepers form is
// removed (ErrNotSleepers otherwise); none there is not an error. Removing
// one of a live receiver would lose no wakeup (producers then write its
// FIFO every time), only the saved writes.
func RemoveSleepers(dir, fifoName string) error {
	path := dir + "/" + scope.SleepersName(fifoName)
	if err := checkSleepers(path); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
		return fmt.Errorf("wake: remove %s: %w", path, err)
	}
	return nil
}

// CheckSleepers reports whether the FIFO fifoName in the wake directory dir
// has a sleepers file a receiver of this user made: nil if so, an error
// wrapping ErrNotSleepers for another file at its name, one wrapping
// fs.ErrNotExist for none (what RemoveSleepers would do, for a dry run).
func CheckSleepers(dir, fifoName string) error {
	return checkSleepers(dir + "/" + scope.SleepersName(fifoName))
}

func checkSleepers(path string) error {
	if s := openSleepers(unix.AT_FDCWD, path); s != nil {
		s.close()
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err == unix.ENOENT {
		return fmt.Errorf("wake: %s: %w", path, err)
	}
	return fmt.Errorf("%w: %s", ErrNotSleepers, path)
}

// WriteSleepers creates the sleepers file of the FIFO fifoName in the wake
// directory dir, with a count of zero, as OpenReceiver does, and leaves it
// unmapped: for tools and tests that lay out a receiver's files. Remove it
// with RemoveSleepers.
func WriteSleepers(dir, fifoName string) error {
	s, err := createSleepers(dir, fifoName)
	if err != nil {
		return fmt.Errorf("wake: sleepers of %s in %s: %w", fifoName, dir, err)
	}
	s.close()
	return nil
}
