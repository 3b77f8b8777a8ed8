//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/shmstate"
)

// inspectScope runs `inspect --scope s --json` and returns that scope.
func inspectScope(t *testing.T, s string) shmstate.Scope {
	t.Helper()
	r := omnishm(t, nil, "inspect", "--scope", s, "--key-prefix", shmtest.Prefix(), "--json")
	r.wantSuccess(t)
	var st shmstate.State
	if err := json.Unmarshal(r.stdout, &st); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
	}
	if len(st.Scopes) != 1 || st.Scopes[0].Name != s || st.Scopes[0].RingDir != scope.New(s).RingDirName {
		t.Fatalf("inspect --scope %s shows %+v", s, st.Scopes)
	}
	return st.Scopes[0]
}

func findRing(sc shmstate.Scope, name string) (shmstate.Ring, bool) {
	for _, r := range sc.Rings {
		if r.Name == name {
			return r, true
		}
	}
	return shmstate.Ring{}, false
}

// startRingSender starts `send` on edge 0->1 of scope s and returns it with
// the ring its frame went to.
func startRingSender(t *testing.T, s, key string) (*cliProc, *connector.Descriptor) {
	t.Helper()
	send := startCLI(t, []byte(`{"n": 7, "t": {"$tensor": {"dtype": "float32", "shape": [2], "data": "AACAPwAAAEA="}}}`),
		"send", "--scope", s, "--from", "0", "--to", "1", "--key", key)
	desc, err := descriptor.Parse([]byte(send.line(t)), key)
	if err != nil || desc.HostRing == nil {
		t.Fatalf("send descriptor %v, %v: want a ring frame", desc, err)
	}
	return send, desc
}

// deadCopy kills a ring producer by SIGKILL after copying its ring file,
// and once the producer's crash watchdog has finished, publishes the copy
// with a marker under another name of the same pid: a real producer's ring,
// proven dead, that no watchdog removes before the test looks (a watchdog
// prunes the dead rings of its scope, SPEC §9).
func deadCopy(t *testing.T, s string, producer *cliProc, ringName string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(scope.ShmDir, ringName))
	if err != nil {
		t.Fatal(err)
	}
	watchdogs := childrenOf(producer.cmd.Process.Pid)
	producer.cmd.Process.Kill()
	producer.wait(t)
	shmtest.Eventually(t, 20*time.Second, "the killed producer's watchdog to finish", func() bool {
		return !slices.ContainsFunc(watchdogs, running)
	})
	n := scope.New(s)
	if err := os.MkdirAll(n.RingDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	name := n.EdgePrefix("0", "1") + strconv.Itoa(producer.cmd.Process.Pid) + "_00000000000000000000000000dead01"
	path := filepath.Join(scope.ShmDir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.RingDir(), name), nil, 0o600); err != nil {
		os.Remove(path)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(path)
		os.Remove(filepath.Join(n.RingDir(), name))
	})
	return name
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
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

// running reports whether pid is a process that has not exited (a zombie
// has: in a container no one may reap an orphaned watchdog).
func running(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
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

func TestInspectLiveAndDeadRings(t *testing.T) {
	s := opsScope(t)
	sweepAfterKills(t, s)
	key := shmtest.Key("inspect")
	send, desc := startRingSender(t, s, key)

	sc := inspectScope(t, s)
	live, ok := findRing(sc, desc.HostRing.Name)
	if !ok {
		t.Fatalf("ring %s not shown: %+v", desc.HostRing.Name, sc)
	}
	if live.Producer != shmstate.Alive || live.Busy || live.Ready != 1 || live.Done != 0 || !slices.Equal(live.ReadyKeys, []string{key}) ||
		!live.Marker || live.From != "0" || live.To != "1" || live.PID != send.cmd.Process.Pid ||
		live.Capacity != ring.DefaultCapacity || live.Used == 0 || live.Error != "" {
		t.Errorf("live ring = %+v", live)
	}
	human := omnishm(t, nil, "inspect", "--scope", s)
	human.wantSuccess(t)
	for _, want := range []string{strconv.Quote(s), "alive", key, "0->1", "RING"} {
		if !strings.Contains(string(human.stdout), want) {
			t.Errorf("inspect output lacks %q:\n%s", want, human.stdout)
		}
	}

	dead := deadCopy(t, s, send, desc.HostRing.Name)
	sc = inspectScope(t, s)
	r, ok := findRing(sc, dead)
	if !ok || r.Producer != shmstate.Dead || r.Ready != 1 || !slices.Equal(r.ReadyKeys, []string{key}) || !r.Marker {
		t.Errorf("dead producer's ring = %+v (found %v)", r, ok)
	}
	// The producer's own ring: gone (its watchdog unlinked it) or dead.
	if orig, ok := findRing(sc, desc.HostRing.Name); ok && orig.Producer != shmstate.Dead {
		t.Errorf("killed producer's ring = %+v", orig)
	}
	if r := omnishm(t, nil, "prune", "--scope", s, "--key-prefix", shmtest.Prefix()); r.code != 0 {
		t.Fatalf("prune: %d %s", r.code, r.stderr)
	}
	if sc := inspectScope(t, s); len(sc.Rings) != 0 || len(sc.MarkersWithoutRing) != 0 || sc.RingDirExists {
		t.Errorf("after prune: %+v", sc)
	}
}
