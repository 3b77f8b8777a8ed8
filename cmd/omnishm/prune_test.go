//go:build linux

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// prunedPaths returns the paths of the "removed ..." (or "would remove
// ...") lines of prune's output.
func prunedPaths(t *testing.T, out []byte, verb string) []string {
	t.Helper()
	var paths []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		rest, ok := strings.CutPrefix(line, verb+" ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			t.Fatalf("prune line %q", line)
		}
		paths = append(paths, f[1])
	}
	slices.Sort(paths)
	return paths
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestPruneRemovesOnlyTheDead(t *testing.T) {
	s := opsScope(t)
	sweepAfterKills(t, s)
	n := scope.New(s)
	liveKey, deadKey := shmtest.Key("live"), shmtest.Key("dead")
	live, liveDesc := startRingSender(t, s, liveKey)
	doomed, doomedDesc := startRingSender(t, s, deadKey)
	dead := deadCopy(t, s, doomed, doomedDesc.HostRing.Name)

	orphan := filepath.Join(scope.ShmDir, "shm_"+shmtest.Key("orphan")+"_lockfile.lock")
	young := filepath.Join(scope.ShmDir, "shm_"+shmtest.Key("young")+"_lockfile.lock")
	for _, p := range []string{orphan, young} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}
	// The young lock file is a put in progress: its producer (this test)
	// has it open. One open nowhere would go at once.
	inUse, err := os.Open(young)
	if err != nil {
		t.Fatal(err)
	}
	defer inUse.Close()

	mustGo := []string{filepath.Join(scope.ShmDir, dead), filepath.Join(n.RingDir(), dead), orphan}
	mayGo := append(slices.Clone(mustGo), // the killed producer's own ring, unless its watchdog was first
		filepath.Join(scope.ShmDir, doomedDesc.HostRing.Name), filepath.Join(n.RingDir(), doomedDesc.HostRing.Name))
	mustStay := []string{filepath.Join(scope.ShmDir, liveDesc.HostRing.Name), filepath.Join(n.RingDir(), liveDesc.HostRing.Name), young}

	check := func(paths []string) {
		t.Helper()
		for _, p := range mustGo {
			if !slices.Contains(paths, p) {
				t.Errorf("prune did not list %s: %v", p, paths)
			}
		}
		for _, p := range paths {
			if !slices.Contains(mayGo, p) {
				t.Errorf("prune listed %s, which is not a dead producer's or an orphan", p)
			}
		}
	}
	dry := omnishm(t, nil, "prune", "--scope", s, "--key-prefix", shmtest.Prefix(), "--dry-run")
	if dry.code != 0 {
		t.Fatalf("prune --dry-run: %d %s", dry.code, dry.stderr)
	}
	check(prunedPaths(t, dry.stdout, "would remove"))
	for _, p := range mustGo {
		if !exists(p) {
			t.Errorf("dry run removed %s", p)
		}
	}

	r := omnishm(t, nil, "prune", "--scope", s, "--key-prefix", shmtest.Prefix())
	if r.code != 0 {
		t.Fatalf("prune: %d %s", r.code, r.stderr)
	}
	check(prunedPaths(t, r.stdout, "removed"))
	for _, p := range mayGo {
		if exists(p) {
			t.Errorf("%s survived prune", p)
		}
	}
	for _, p := range mustStay {
		if !exists(p) {
			t.Errorf("prune removed %s", p)
		}
	}
	// The live producer's ring still works.
	got := omnishm(t, nil, "recv", "--scope", s, "--from", "0", "--to", "1", "--key", liveKey)
	got.wantSuccess(t)
	if !strings.Contains(string(got.stdout), `"n":7`) {
		t.Errorf("recv after prune: %s", got.stdout)
	}
	if code := live.wait(t); code != 0 {
		t.Errorf("live send exited %d: %s", code, live.errText())
	}
}

// --older-than has no value that silently means never: without the flag no
// segment is removed, with 0s every unlocked one is, and a negative age is
// a usage error.
func TestPruneOlderThan(t *testing.T) {
	s := opsScope(t)
	hourOld := time.Now().Add(-time.Hour)
	cases := []struct {
		args    []string
		removed []bool // of the fresh segment, the one written an hour ago
	}{
		{nil, []bool{false, false}},
		{[]string{"--older-than", "2h"}, []bool{false, false}},
		{[]string{"--older-than", "30m"}, []bool{false, true}},
		{[]string{"--older-than", "0s"}, []bool{true, true}},
	}
	for _, c := range cases {
		t.Run(strings.Join(append([]string{"flags"}, c.args...), " "), func(t *testing.T) {
			var files [][]string
			for _, mtime := range []time.Time{time.Now(), hourOld} {
				key := shmtest.Key("aged")
				kf := shmtest.KeyFiles(scope.ShmDir, key)
				t.Cleanup(func() { os.Remove(kf[0]); os.Remove(kf[1]) })
				shmtest.WriteFile(t, kf[1], nil)
				shmtest.WriteFileAt(t, kf[0], []byte("\xa5payload"), mtime)
				files = append(files, kf)
			}
			args := append([]string{"prune", "--scope", s, "--key-prefix", shmtest.Prefix()}, c.args...)
			r := omnishm(t, nil, args...)
			r.wantSuccess(t)
			for i, kf := range files {
				if c.removed[i] {
					shmtest.AssertAbsent(t, kf...)
				} else {
					shmtest.AssertPresent(t, kf...)
				}
			}
		})
	}
	if r := omnishm(t, nil, "prune", "--scope", s, "--older-than", "-1ns"); r.code != exitUsage {
		t.Fatalf("--older-than -1ns: exit %d, want a usage error", r.code)
	}
}
