//go:build linux

// Package shmstate is a read-only view, and a safe sweeper, of one user's
// omnishm files in /dev/shm: host rings and their discovery markers
// (SPEC §2, §3, §7), per-key segments and their lock files (SPEC §6), and
// wakeup FIFOs (SPEC §8) with the sleepers files of Go receivers.
//
// Scan never waits on a lock: a ring whose lock is held by another process is
// reported busy. Prune removes only what is provably abandoned, re-checking
// each file under a non-blocking lock just before unlinking it:
//   - rings (and markers) whose producer is dead: creator_start no longer
//     matches /proc/{pid}/stat (SPEC §3, §7), never a live producer's;
//   - markers with no ring file;
//   - orphan lock files (segment gone; at once when no process has the
//     lock file open, as /proc tells, else once older than OrphanGrace;
//     SPEC §6);
//   - wakeup FIFOs with no reader (opening for writing gives ENXIO);
//   - a Go receiver's sleepers file (package wake) once its FIFO is gone
//     and no process maps it, never while its FIFO is there or its
//     receiver is still publishing it;
//   - empty ring and wake directories;
//   - per-key segments, only when asked (SegmentsOlderThan) and only when
//     their lock can be taken without waiting.
//
// A Tracker scans repeatedly and adds what one scan cannot tell: how long
// the oldest ready frame of each ring has waited, and the puts and claims
// of each ring since its previous scan (Ring.Activity, Scope.Edges), for
// `omnishm inspect --watch` and `omnishm exporter`. ScanRing reads one ring
// file for a process that knows its own; State.Orphans counts what Prune
// would consider.
//
// The per-key files are listed and swept by the segment package
// (segment.Locks, segment.Sweep), which owns their lock protocol.
//
// A per-key segment is a regular file of this uid, other than a ring file,
// whose lock file shm_{key}_lockfile.lock exists beside it: every producer
// (Go and Python) creates the lock before the segment and every receiver
// removes the segment before the lock, so a segment without its lock is not
// one this package can tell apart from another program's shared memory, and
// it is never shown or touched.
//
// Liveness is judged by start time in this PID namespace (package proc); as
// SPEC §7 says, ring endpoints must share one, and so must the tool. Ring
// files are read through package ring (Inspect, ReadHeader) and markers
// changed through its registry update (ring.UpdateRegistry); this package
// only decides what is abandoned.
//
// Scan and Prune are Linux-only (by build tag): /dev/shm, flock and /proc
// are Linux's. The types build everywhere.
package shmstate
