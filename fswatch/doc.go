//go:build linux

// Package fswatch owns omnishm's use of inotify (Linux only): an instance,
// its watches, the parsing of its events, queue overflow and the loss of a
// watch. The ring's discovery (SPEC §7) and the wakeup notifier (SPEC §8)
// both follow a directory through it.
//
// A Watcher reads its instance either in the background, in one goroutine
// parked in Go's runtime poller (no thread per watch or per waiter), or only
// when its owner calls Sync, for a busy directory nobody should wake for.
// Each Watch carries an epoch that moves on every event of the watch, so
// "did anything change?" costs one atomic load; C delivers a coalesced
// notification for callers that select instead of polling epochs.
//
// A watch made with AddNamed also hands its owner the name of each event,
// for a directory whose entries matter one by one (the receive dispatcher
// learns which lock files in /dev/shm were closed after a publication).
//
// Ownership: a Watcher's events never escape it; callers see epochs, flags,
// counters and, for AddNamed, names valid only during the call. On other
// systems the package is empty.
package fswatch
