//go:build linux

// Package interop proves, with the seed's own Python code as the peer, that
// omnishm's host ring, per-key segments and connector interoperate with
// vLLM-Omni's SharedMemoryConnector through the same /dev/shm files (SPEC §2,
// §3, §6, §7). It holds tests only; testdata/shm_ring_peer.py is the seed's
// shm_ring.py and testdata/peer.py the command-line harness around it.
//
// It builds on Linux only (build tag linux), as it needs /dev/shm.
package interop
