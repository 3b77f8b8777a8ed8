//go:build !linux

package main

import (
	"os"
	"syscall"
	"time"
)

var benchEpoch = time.Now()

// benchClock is only comparable within one process here: latency mode
// needs Linux's system-wide CLOCK_MONOTONIC.
func benchClock() time.Duration { return time.Since(benchEpoch) }

func benchChildAttr() *syscall.SysProcAttr { return nil }

func benchIsTerminal(*os.File) bool { return false }
