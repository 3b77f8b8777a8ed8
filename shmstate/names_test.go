package shmstate

import (
	"testing"

	"omnishm/scope"
)

func TestNames(t *testing.T) {
	uid := 1000
	d := scope.ForUID(uid, "s", 1).RingDirName
	ringCases := []struct {
		name string
		want ringName
		ok   bool
	}{
		{d + "_0_1_123_0123456789abcdef0123456789abcdef", ringName{dir: d, from: "0", to: "1", pid: 123}, true},
		{d + "_10_2_9_ab", ringName{dir: d, from: "10", to: "2", pid: 9}, true},
		{d + "_0_1_123", ringName{}, false},
		{d + "_0_1_x_ab", ringName{}, false},
		{d + "_0_1_0_ab", ringName{}, false},
		{d + "_a_1_2_ab", ringName{}, false},
		{d + "_0_1_2_zz", ringName{}, false},
		{d + "_0_1_2_ab_cd", ringName{}, false},
		{d, ringName{}, false},
		{"omni_shm_ring_v1_1001_" + d[len(d)-24:] + "_0_1_2_ab", ringName{}, false},
		{d + "_0_1_2_a-b", ringName{}, false},
	}
	for _, tc := range ringCases {
		got, ok := parseRingName(uid, tc.name)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseRingName(%q) = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if !isRingDirName(uid, d) || isRingDirName(uid, d+"0") || isRingDirName(uid+1, d) {
		t.Error("isRingDirName")
	}
	n := scope.ForUID(uid, "my-deployment", 1)
	if got, ok := wakeDirRingDir(uid, n.WakeDir[len(scope.ShmDir)+1:]); !ok || got != n.RingDirName {
		t.Errorf("wakeDirRingDir = %q, %v; want %q", got, ok, n.RingDirName)
	}
	noScope := scope.ForUID(uid, "", 4242)
	if got, ok := wakeDirRingDir(uid, "omni_shm_wake_1000_4242"); !ok || got != noScope.RingDirName {
		t.Errorf("wakeDirRingDir(ppid form) = %q, %v", got, ok)
	}
	if _, ok := wakeDirRingDir(uid, "omni_shm_wake_1001_4242"); ok {
		t.Error("wake dir of another uid accepted")
	}
	for name, want := range map[string]string{"shm_k_lockfile.lock": "k", "shm_a_b_lockfile.lock": "a_b", "shm__lockfile.lock": "", "x_k_lockfile.lock": ""} {
		got, ok := lockKey(name)
		if got != want || ok != (want != "") {
			t.Errorf("lockKey(%q) = %q, %v", name, got, ok)
		}
	}
	if lockName("k") != "shm_k_lockfile.lock" {
		t.Error("lockName")
	}
	for name, want := range map[string]string{"3_abcdef": "3", "x_abc": "", "3_": "", "3": "", "3_xyz": ""} {
		got, ok := fifoStage(name)
		if got != want || ok != (want != "") {
			t.Errorf("fifoStage(%q) = %q, %v", name, got, ok)
		}
	}
}
