//go:build !linux

package main

import (
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

// monotonicNow falls back to the wall clock, the one clock other processes
// share without CLOCK_MONOTONIC being system-wide.
func monotonicNow() int64 { return time.Now().UnixNano() }

// peer watches another process with kill(pid, 0) only: without pidfds or
// /proc a reused pid cannot be told apart.
type peer struct{ pid int }

func watchPeer(pid int) (*peer, error) { return &peer{pid: pid}, nil }
func (p *peer) alive() bool            { return unix.Kill(p.pid, 0) == nil }
func (p *peer) close()                 {}

// dieWithParent has no portable equivalent; the stages also exit when
// their stdin (the parent's pipe) closes.
func dieWithParent(*exec.Cmd) {}

// childExited cannot look without reaping here; the caller waits for the
// stage's end of stdout instead.
func childExited(int) bool { return false }
