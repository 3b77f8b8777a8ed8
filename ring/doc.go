// Package ring is the host ring of SPEC §3 and its discovery and producer
// identity (SPEC §7): one bounded shared-memory ring file per producer
// process and edge, byte-compatible with vLLM-Omni's Python shm_ring.py, so
// a Go producer's frames are claimed by a Python receiver and the other way
// round.
//
// The package has two layers. The pure core builds everywhere: layout.go
// (header, frame validation, reclaim, placement, scan, Parse, ReadHeader),
// capacity.go (the one home of the capacity bounds) and ring.go (Options and
// the errors callers branch on). The shared-memory layer is Linux-only by
// build tag, as flock, mmap, pidfds and inotify are: a Transport is one
// process's view, the rings it owns (producer_linux.go, created lazily on
// an edge's first Put) and the peers' rings it reads (reader_linux.go),
// found through the registry (discovery_linux.go, registry_linux.go,
// watch_linux.go); Sweep and Changes (sweep_linux.go) serve a receiver
// that waits on many keys at once, one locked scan per ring for all of
// them; Inspect and Claimed read a ring file from outside.
//
// Ownership: this package is the one reader and writer of ring files and
// of the ring directory's markers and stamp (UpdateRegistry). Producer
// liveness is package proc's, inotify package fswatch's. Put's write
// callback and Get's decode callback see ring memory only while the ring
// lock is held; nothing they are given may be retained, and nothing returned
// by this package aliases shared memory. The package never logs: a ring that
// cannot be set up is reported through Options.OnSetupFailure.
package ring
