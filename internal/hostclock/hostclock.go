//go:build linux

// Package hostclock reads the one clock every process of this host shares,
// so a time stamped in one process (a put in the bench, a chunk sent by the
// demo's first stage) can be subtracted from a time stamped in another (its
// arrival in the receiving process).
//
// It builds on Linux only (build tag linux), as it needs CLOCK_MONOTONIC shared by the processes of one host.
package hostclock
