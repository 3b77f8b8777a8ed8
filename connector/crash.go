//go:build linux

package connector

import (
	"errors"
	"os"

	"omnishm/segment"
	"omnishm/watchdog"
)

// Crash cleanup (SPEC §9): the process-wide watchdog learns every file this
// connector makes, by name before it exists where that matters, so that a
// process killed by SIGKILL leaves nothing in /dev/shm: its rings (and,
// through ring.Prune, their markers), its pending segments and their lock
// files, the segment it was writing, its FIFO and the directories it made
// if they are empty; and, for a receiver, the lock file of a segment it
// was claiming.

func (c *SHM) track(path string)        { c.watched(watchdog.Default().Track(path)) }
func (c *SHM) trackSegment(path string) { c.watched(watchdog.Default().TrackSegment(path)) }
func (c *SHM) trackDir(path string)     { c.watched(watchdog.Default().TrackDir(path)) }
func (c *SHM) forget(path string)       { watchdog.Default().Forget(path) }

// watched warns once when the watchdog cannot run; the connector carries on.
func (c *SHM) watched(err error) {
	if err != nil && !c.watchdogWarned.Swap(true) {
		c.log.Warn("omnishm: crash watchdog unavailable; a killed process may leave files in /dev/shm", "err", err)
	}
}

// trackRingDir names the ring directory to the watchdog before the first
// ring put of this connector may create it.
func (c *SHM) trackRingDir() {
	if !c.ringDirTracked.Load() && !c.ringDirTracked.Swap(true) {
		c.trackDir(c.names.RingDir())
	}
}

// trackFIFOs names this process's wake FIFOs to the watchdog, right after
// the receiver made its own, and returns their paths for untrackFIFOs.
func (c *SHM) trackFIFOs() []string {
	fifos := receiverFIFOs(c.names.WakeDir)
	for _, path := range fifos {
		c.track(path)
	}
	return fifos
}

// untrackFIFOs forgets the FIFOs that are gone now that the receiver has
// closed: its own (another receiver's of this process stays tracked).
func (c *SHM) untrackFIFOs(fifos []string) {
	for _, path := range fifos {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			c.forget(path)
		}
	}
}

// missUnsafe turns a file that is not a segment of this user, at a key's
// name, into a miss: anyone can plant one in /dev/shm, and it must not make
// every get of that key fail. It is logged once per connector.
func (c *SHM) missUnsafe(key string, err error) bool {
	if !errors.Is(err, segment.ErrUnsafe) {
		return false
	}
	if !c.unsafeWarned.Swap(true) {
		c.log.Warn("omnishm: a file at a key's name is not a segment of this user; gets of it miss (logged once)", "key", key, "err", err)
	}
	return true
}
