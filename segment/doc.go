// Package segment is the per-key shared-memory path of SPEC §6: one POSIX
// shm segment per key at {dir}/{key}, guarded by the lock file
// {dir}/shm_{key}_lockfile.lock, with the same file names, lock protocol and
// bytes as vLLM-Omni's Python SharedMemoryConnector. It moves bytes only; the
// caller serializes (SPEC §5).
package segment

// DefaultDir is where POSIX shared memory lives on Linux; shm_open("/key")
// is the file DefaultDir/key.
const DefaultDir = "/dev/shm"
