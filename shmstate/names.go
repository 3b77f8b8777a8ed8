package shmstate

import (
	"fmt"
	"strconv"
	"strings"

	"omnishm/scope"
)

// Name patterns of SPEC §2, §6 and §8.
const (
	wakeDirPrefix = "omni_shm_wake_"
	lockPrefix    = "shm_"
	lockSuffix    = "_lockfile.lock"
	hashDigits    = 24
)

// ringDirPrefix is omni_shm_ring_v1_{uid}_, the start of every ring
// directory and ring file name of uid.
func ringDirPrefix(uid int) string { return fmt.Sprintf("%s%d_", scope.RingDirPrefix, uid) }

// isRingDirName reports whether name is a ring directory D of uid.
func isRingDirName(uid int, name string) bool {
	rest, ok := strings.CutPrefix(name, ringDirPrefix(uid))
	return ok && len(rest) == hashDigits && isHex(rest)
}

// ringName is a ring file name split into its parts:
// {D}_{from}_{to}_{pid}_{uuid4 hex}.
type ringName struct {
	dir, from, to string
	pid           int
}

// parseRingName splits a ring file name of uid, or reports false.
func parseRingName(uid int, name string) (ringName, bool) {
	p := ringDirPrefix(uid)
	if !strings.HasPrefix(name, p) || len(name) < len(p)+hashDigits+1 || !scope.ValidRingName(uid, name) {
		return ringName{}, false
	}
	dir := name[:len(p)+hashDigits]
	if !isRingDirName(uid, dir) || name[len(dir)] != '_' {
		return ringName{}, false
	}
	parts := strings.Split(name[len(dir)+1:], "_")
	if len(parts) != 4 || !scope.IsNumeric(parts[0]) || !scope.IsNumeric(parts[1]) || !scope.IsNumeric(parts[2]) || parts[3] == "" || !isHex(parts[3]) {
		return ringName{}, false
	}
	pid, err := strconv.Atoi(parts[2])
	if err != nil || pid <= 0 {
		return ringName{}, false
	}
	return ringName{dir: dir, from: parts[0], to: parts[1], pid: pid}, true
}

// wakeDirRingDir is the ring directory name that belongs to the wake
// directory named wakeName (SPEC §2: D hashes the path of W), or false if
// wakeName is not a wake directory of uid.
func wakeDirRingDir(uid int, wakeName string) (string, bool) {
	rest, ok := strings.CutPrefix(wakeName, fmt.Sprintf("%s%d_", wakeDirPrefix, uid))
	if !ok || rest == "" || strings.ContainsAny(rest, "/_") {
		return "", false
	}
	return ringDirPrefix(uid) + scope.Hash(scope.ShmDir+"/"+wakeName), true
}

// lockKey returns the key of a lock file name shm_{key}_lockfile.lock.
func lockKey(name string) (string, bool) {
	if !strings.HasPrefix(name, lockPrefix) || !strings.HasSuffix(name, lockSuffix) || len(name) <= len(lockPrefix)+len(lockSuffix) {
		return "", false
	}
	return name[len(lockPrefix) : len(name)-len(lockSuffix)], true
}

// lockName is the lock file name of key (SPEC §6).
func lockName(key string) string { return lockPrefix + key + lockSuffix }

// fifoStage returns the stage of a wakeup FIFO name {stage}_{uuid4 hex}.
func fifoStage(name string) (string, bool) {
	stage, id, ok := strings.Cut(name, "_")
	if !ok || !scope.IsNumeric(stage) || id == "" || !isHex(id) {
		return "", false
	}
	return stage, true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
