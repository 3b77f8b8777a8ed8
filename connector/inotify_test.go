//go:build linux

package connector_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"omnishm/connector"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// A process whose user has no inotify instance left (the per-user limit,
// 128 on many systems, is reached) still delivers on both paths, by
// polling, and each of its connectors says so once: a child run as a user
// of its own takes every instance that user may have, then opens its
// connectors.
func TestNoInotifyInstanceLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as a user of its own")
	}
	s := shmtest.Scope(t)
	// A uid no account has: its limit is the child's alone.
	uid := 2_000_000_000 + os.Getpid()%1_000_000
	if !uidMapped(t, uid) {
		t.Skipf("uid %d is not mapped in this user namespace", uid)
	}
	names := scope.ForUID(uid, s, 0)
	t.Cleanup(func() { shmtest.AssertAbsent(t, names.RingDir(), names.WakeDir) })
	child := shmtest.StartAs(t, &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}, "noinotify", s)
	line := child.Line(t, shmtest.Patience)
	var taken, said, connectors int
	if _, err := fmt.Sscanf(line, "ok %d %d %d", &taken, &said, &connectors); err != nil {
		t.Fatalf("child: %s", line)
	}
	if taken == 0 || said != connectors {
		t.Fatalf("child took %d inotify instances and its %d connectors said so %d times, want once each", taken, connectors, said)
	}
	if err := child.Wait(t, shmtest.Patience); err != nil {
		t.Fatal(err)
	}
}

// roleNoInotify: scope. It takes every inotify instance its user may
// have, opens stage 0 and stage 1 of scope, and twice over has a ring and
// a per-key payload reach a Recv that waits for it; then it says "ok", the
// instances it took and the warnings that name inotify, or what went
// wrong.
func roleNoInotify(args []string) int {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if errors.Is(err, unix.EMFILE) {
			break
		}
		if err != nil {
			return shmtest.ChildFailed(fmt.Errorf("inotify_init1 after %d: %w", len(fds), err))
		}
		if fds = append(fds, fd); len(fds) > 1<<16 {
			return shmtest.ChildFailed(errors.New("no limit on inotify instances met"))
		}
	}
	warns := &conntest.Warnings{}
	var opened []*connector.SHM
	defer func() {
		for _, c := range opened {
			c.Close()
		}
	}()
	for _, stage := range []connector.Stage{"0", "1"} {
		c, err := connector.Open(connector.Options{WakeupScope: args[0], StageID: stage, HostRingBytes: hostileRing, Logger: warns.Logger()})
		if err != nil {
			return shmtest.ChildFailed(err)
		}
		opened = append(opened, c)
	}
	sender, receiver := opened[0], opened[1]
	ctx, cancel := context.WithTimeout(context.Background(), shmtest.Patience)
	defer cancel()
	for round := range 2 {
		for _, n := range []int{ringCodes, keyCodes} {
			key := "k" + strconv.Itoa(round) + "_" + strconv.Itoa(n)
			got := make(chan error, 1)
			go func() {
				v, _, err := receiver.Recv(ctx, "0", key)
				if err == nil {
					if c := conntest.ChildCodes(v); len(c) != n || c[0] != int64(round) {
						err = fmt.Errorf("%d values from %v", len(c), c[:min(1, len(c))])
					}
				}
				got <- err
			}()
			// The put comes once the Recv waits on the dispatcher, which
			// then has no hint of the per-key payload: only its wakeup.
			for receiver.Waiting() == 0 && ctx.Err() == nil && len(got) == 0 {
				runtime.Gosched()
			}
			if _, _, err := sender.Put("0", "1", key, conntest.Codes(n, int64(round))); err != nil {
				return shmtest.ChildFailed(fmt.Errorf("put %s: %w", key, err))
			}
			if err := <-got; err != nil {
				return shmtest.ChildFailed(fmt.Errorf("recv %s: %w", key, err))
			}
		}
	}
	shmtest.Say("ok %d %d %d", len(fds), warns.Containing("inotify"), len(opened))
	return 0
}

// uidMapped reports whether this user namespace maps uid (/proc/self/uid_map:
// "inside outside count" ranges), so a child may run as it.
func uidMapped(t *testing.T, uid int) bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		t.Skip("no uid map:", err)
	}
	for line := range strings.Lines(string(b)) {
		var inside, outside, count int
		if _, err := fmt.Sscan(line, &inside, &outside, &count); err == nil && uid >= inside && uid < inside+count {
			return true
		}
	}
	return false
}
