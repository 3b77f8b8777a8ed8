//go:build linux

// Package connector is the one object a pipeline stage uses to move
// payloads along its edges: vLLM-Omni's SharedMemoryConnector in Go
// (SPEC §9), byte-compatible with the Python one, so a Go stage and a Python
// stage on one host exchange payloads in either direction.
//
// # Using it
//
// Open a connector per process with Options (the zero value is the
// defaults), or build one from a configuration with New. Put publishes a
// payload under a key on an edge (from, to); exactly one Get or Recv, in
// any process of the deployment, claims it. A miss is ok=false, not an
// error. Stage ids are ASCII decimal digits (Stage, ParseStage); both ends
// of an edge must open their connectors with the same WakeupScope.
//
// Payloads are what package wire encodes: a typed numeric slice such as
// []float32 travels as the 1-D tensor it is (a Python peer gets a
// torch.Tensor of its dtype), and RecvAs decodes what arrives into a Go
// type (wire.Decode).
//
// A put takes the host ring (package ring) when the ring is on and both
// stage ids are numeric and the payload fits a quarter of the ring; else,
// or when the ring is full, a per-key segment (package segment). After a
// put the receiving stage's FIFOs get one wakeup byte (package wake).
//
// # Waiting
//
// Recv takes what has arrived at once. Otherwise one receive dispatcher per
// connector (started by the first Recv that waits, stopped by Close) waits
// for every Recv: on the stage's wakeup FIFO, the ring's registry and its
// producers' pidfds, and the lock files per-key producers close in
// /dev/shm (SPEC §6), all through Go's runtime poller. A put wakes only
// the waiter of its key: on a wakeup each attached ring of the edge is
// scanned once under its lock, and a per-key segment is tried only for a
// waited key whose lock file was closed, or in the connector-wide safety
// re-poll. A waiting Recv costs a channel and a map entry: no OS thread,
// timer or poll of its own. The protocol is unchanged: Python producers and
// receivers on the same edge interoperate, a Python receiver competing with
// the dispatcher still gets each publication exactly once, and Get works
// without the dispatcher. RecvMessage and GetMessage also say which
// producer published a payload (a ring's creator), so a caller can follow
// its liveness.
//
// # Memory ownership
//
// Put copies the payload (into the ring or a segment) before it returns:
// the caller may overwrite its buffers at once. A payload returned by Get
// or Recv is the caller's: nothing in it aliases shared memory, and large
// tensors own their bytes (they never share a backing array with small
// values). Descriptors are plain values.
//
// GetInto and RecvInto decode into memory the caller supplies instead (a
// frame.Allocator such as a frame.Arena over a buffer it recycles): tensor
// bytes are copied once out of shared memory into it, and no allocation the
// size of the payload is made, zeroed or faulted in per message. That
// memory stays the caller's; the connector keeps no reference to it, and
// a publication it has no room for is left in place (the error wraps
// frame.ErrAllocate). A put copies tensor bytes once too, straight from the
// caller's slices into the ring or the segment.
//
// # Files in /dev/shm
//
// All names come from package scope (SPEC §2, §6, §8). A connector creates:
//
//   - per producer and edge, on the first ring put of that edge: a ring
//     file omni_shm_ring_v1_{uid}_{hash}_{from}_{to}_{pid}_{uuid}, the ring
//     directory omni_shm_ring_v1_{uid}_{hash} and a marker in it;
//   - per key that takes the per-key path: the segment {key} and its lock
//     file shm_{key}_lockfile.lock;
//   - for a stage with wakeups on: the wake directory
//     omni_shm_wake_{uid}_{hash} and one FIFO {stage}_{uuid} in it.
//
// Close unlinks the connector's rings and markers (and the ring directory
// once empty), its unclaimed segments and its FIFO, and retires its
// unclaimed frames. A receiver's Get removes the segment it claims and its
// lock file; it never unlinks another producer's ring. If the process dies
// without Close, its crash watchdog (package watchdog, a child process
// started with the first file) unlinks its rings and segments; what is left
// is data-free and `omnishm prune` removes it.
//
// # Errors and logs
//
// Errors are returned, never logged, and carry context once per layer: the
// packages below name the operation and the file, the connector adds the
// operation and the key, a caller above what it alone knows:
//
//	connector: get "req-1_0_3": wire: corrupt msgpack: ...
//
// Branch with errors.Is on ErrClosed, ErrBadKey, ErrBadStage,
// ErrBadDescriptor and ErrUnknownConnector. A Recv whose deadline passes
// returns a *RecvTimeoutError: it matches context.DeadlineExceeded and
// says in which scope the receiver looked and what it saw on the edge. What is not an error of any call (a ring that cannot
// be set up for an edge, which then falls back to segments; a missing
// wakeup FIFO, which makes the dispatcher poll; an unavailable watchdog) is logged
// once to Options.Logger.
//
// # Figures
//
// Health has the counters of SPEC §9; Stats has them per edge: puts, gets
// and bytes by path, why puts fell back to segments, the receives waiting,
// and, once MeasureLatency is on, put-latency and receive-wait histograms.
// They are lock-free and allocate nothing; package metrics exports them to
// Prometheus.
//
// # Other transports
//
// Transport and Receiver are what every connector implements; a transport
// for stages on other hosts implements Receiver and calls Register, and New
// builds it from a configuration naming it.
//
// The package builds on Linux only: shared memory, flock and pidfds are
// Linux's.
package connector
