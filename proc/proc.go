// Package proc owns process identity and liveness: a process is named by its
// pid and its start time (field 22 of /proc/{pid}/stat), which together name
// one process for its whole life, so a reused pid is never taken for the
// process that created a ring (SPEC §3, §7).
//
// Liveness has three answers. Only a definite one is Dead (the pid names no
// process, or one with another start time); a /proc that cannot be read says
// Unknown, and SPEC §9 requires that Unknown never removes anything.
//
// This package is Linux-only in what it reads (/proc, pidfds); ParseStartTime
// and the types build everywhere.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// ErrNoProcess means the pid names no live process, as opposed to a failure
// to find out.
var ErrNoProcess = errors.New("proc: no such process")

// ID names one process for its whole life: its pid and its start time in
// clock ticks since boot. The zero ID names no process.
type ID struct {
	PID   int
	Start uint64
}

// String is "pid/start".
func (id ID) String() string { return strconv.Itoa(id.PID) + "/" + strconv.FormatUint(id.Start, 10) }

// Liveness is what can be said of a process: Unknown is the zero value,
// because saying nothing must never count as dead.
type Liveness int

// The liveness answers.
const (
	Unknown Liveness = iota // /proc could not be read: keep everything
	Alive                   // the pid runs and started at the recorded time
	Dead                    // no such process, or the pid was reused
)

func (l Liveness) String() string {
	switch l {
	case Alive:
		return "alive"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// ParseStartTime reads field 22 (starttime) of a /proc/{pid}/stat line. The
// command name (field 2) may hold spaces and ')', so fields are counted after
// the last ')'.
func ParseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("proc: malformed stat line")
	}
	fields := bytes.Fields(stat[i+1:])
	if len(fields) < 20 { // fields 3..22
		return 0, errors.New("proc: short stat line")
	}
	v, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc: stat start time: %w", err)
	}
	return v, nil
}

// judge decides liveness from what /proc said: start is the recorded start
// time, now and err the current one, gone whether the process certainly
// does not exist.
func judge(start, now uint64, err error, gone func() bool) Liveness {
	switch {
	case err == nil && now == start:
		return Alive
	case err == nil || errors.Is(err, ErrNoProcess) || gone():
		return Dead
	}
	return Unknown
}
