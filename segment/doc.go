//go:build linux

// Package segment is the per-key shared-memory path of SPEC §6, with the
// same file names, lock protocol and bytes as vLLM-Omni's Python
// SharedMemoryConnector. It moves bytes only; the caller serializes
// (SPEC §5). It needs Linux: elsewhere every operation fails with
// errors.ErrUnsupported.
//
// # Files
//
// A publication under key is two files in one directory (DefaultDir unless
// Options.Dir or a dir argument says otherwise):
//   - the segment {dir}/{key}, a regular file of mode 0600 holding exactly
//     the payload: the plain bytes when this package writes it, the plain
//     or the OMNIIPC1-wrapped form when Claim reads it;
//   - the lock file {dir}/shm_{key}_lockfile.lock (scope.LockName), empty,
//     mode 0600, whose flock serializes everyone who touches the key.
//
// Keys are checked by keys.Check before any file is touched.
//
// # Who removes what
//
// A receiver's Claim removes both files of the publication it takes. A
// Producer removes the ones it published that no one claimed: Cleanup and
// CleanupPrefix on request, Close for all of them, and a Put over an
// unclaimed key replaces the segment. A producer or receiver that crashes
// leaves a lock file without a segment, or both files. Its crash watchdog
// removes them: the hooks of Options and Claimer name every segment before
// its files exist or change, the watchdog unlinks the segment it knew by
// identity and RemoveAbandoned judges the rest under the key's lock (the
// lock file, and a segment left empty). Without a watchdog, Sweep removes
// such a lock file once it is older than OrphanGrace, and, only when asked
// (SweepOptions.SegmentsOlderThan), old unclaimed segments.
//
// # The lock protocol
//
// Put opens (creating) the lock file for writing, takes its flock, waiting,
// and checks that the locked file is still the one at the path (a receiver
// may have removed it: reopen, up to three times); then it writes the
// segment and unlocks. Closing the lock file after the segment is complete
// makes its IN_CLOSE_WRITE event a publication hint, never proof.
// Claim stats the segment (absent or empty: a miss, for one stat), takes
// the lock without waiting (contention: a miss), checks its identity, reads
// the bytes, unlinks the segment, then the lock file while still holding
// it. Sweep removes a lock file after checking it, locking it without
// waiting and checking again that it is the same file, still this user's,
// still old, and its segment still absent. No one ever waits on a lock but
// a producer, so a receiver or a sweep never blocks on another process.
//
// # Memory and identity
//
// Put copies its data into the segment before it returns; Claim returns a
// new slice the caller owns; nothing returned aliases shared memory. A
// Producer records, for each publication, the identity (device and inode)
// of the file it created. A key can be claimed and then published again by
// another producer; by that identity Claimed, Cleanup and Close tell the
// other's segment from their own and leave it alone. A producer that must
// stay until its publication is taken (omnishm send) polls
// Producer.Claimed, which takes no lock.
//
// # Errors
//
// Errors say "segment: {operation}:" and name the file the failing system
// call was on, once, as an *fs.PathError (so errors.Is sees the errno);
// callers add the key if they want it. Misses are not errors. Sentinels:
// ErrClosed, ErrCorrupt, ErrUnsafe (a file at a key's name that is not this
// user's regular file: callers treat it as a miss), and keys.ErrBadKey for
// a bad key. The package never logs.
//
// It builds on Linux only (build tag linux), as it needs POSIX shared memory in /dev/shm and flock.
package segment

// DefaultDir is where POSIX shared memory lives on Linux; shm_open("/key")
// is the file DefaultDir/key.
const DefaultDir = "/dev/shm"
