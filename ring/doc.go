// Package ring is the host ring of SPEC §3 and its discovery and producer
// identity (SPEC §7): one bounded shared-memory ring file per producer
// process and edge, byte-compatible with vLLM-Omni's Python shm_ring.py, so
// a Go producer's frames are claimed by a Python receiver and the other way
// round.
//
// layout.go is the pure core (header, frame validation, reclaim, placement,
// scan, Parse); the *_linux.go files map, lock, stamp and watch files
// around it. A Transport is one process's view: the rings it owns (created
// lazily on an edge's first Put) and the peers' rings it has attached.
//
// Memory ownership: Put's write callback and Get's decode callback see ring
// memory only while the ring lock is held; nothing they are given may be
// retained, and nothing returned by this package aliases shared memory.
package ring
