//go:build linux

package shmtest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"omnishm/proc"
)

// For children a test kills at random (crash soaks): reading and writing
// them must not fail the test when they are gone.

// ReadLine returns the child's next stdout line, or io.EOF once it has
// exited and every line it wrote was read, or ctx's error. Unlike Line it
// never fails the test.
func (p *Proc) ReadLine(ctx context.Context) (string, error) { return p.child.Line(ctx) }

// TrySend is Send that returns the error (the child is gone) instead of
// failing the test.
func (p *Proc) TrySend(line string) error { return p.child.Send(line) }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.child.Pid() }

// ID is the identity of the running child (pid and start time), as a
// producer's ReaderOptions.Sender or a file's creator names it.
func (p *Proc) ID(t testing.TB) proc.ID {
	t.Helper()
	start, err := proc.StartTime(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	return proc.ID{PID: p.Pid(), Start: start}
}

// Running reports whether pid is a process that has not exited. A zombie
// has: in a container nobody may reap an orphaned child, such as a watchdog.
func Running(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

// Children lists the processes whose parent is pid.
func Children(pid int) []int {
	var kids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(child); ok && ppid == pid {
			kids = append(kids, child)
		}
	}
	return kids
}

// procStat reads the parent pid and state of pid from /proc/{pid}/stat.
func procStat(pid int) (ppid int, state string, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(fields[1])
	return ppid, fields[0], err == nil
}

// idleRole is a child that lives until told to exit; every package's
// TestMain gets the role from Main, as it gets lockRole.
const idleRole = "idle"

// idle is the child side of DeadProcess.
func idle([]string) int {
	Say("ready")
	Hear()
	return 0
}

// DeadProcess returns the identity of a process that has exited, such as a
// crashed producer whose files outlive it.
func DeadProcess(t testing.TB) proc.ID {
	t.Helper()
	p := Start(t, idleRole)
	p.Expect(t, Patience, "ready")
	id := p.ID(t)
	p.Kill()
	return id
}
