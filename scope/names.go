package scope

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// hashDigits is the length of H(s) (SPEC §2).
const hashDigits = 24

// Name patterns of SPEC §2, §6 and §8.
const (
	wakeDirPrefix = "omni_shm_wake_"
	lockPrefix    = "shm_"
	lockSuffix    = "_lockfile.lock"
	tempFIFO      = ".tmp_"
	sleepersFile  = ".sleepers_"
)

// NewID returns a random version-4 UUID in Python's uuid4().hex form: the
// last part of ring file and FIFO names.
func NewID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("scope: random name: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:]), nil
}

// Path is the path in ShmDir of a file name.
func Path(name string) string { return ShmDir + "/" + name }

// RingName is the name of this scope's ring file for an edge, created by
// process pid: {D}_{from}_{to}_{pid}_{id} (SPEC §2).
func (n Names) RingName(from, to string, pid int, id string) string {
	return n.EdgePrefix(from, to) + strconv.Itoa(pid) + "_" + id
}

// MarkerPath is the path of a ring file's marker in the ring directory.
func (n Names) MarkerPath(ringName string) string { return n.RingDir() + "/" + ringName }

// FIFOPath is the path of a wake FIFO name in the wake directory.
func (n Names) FIFOPath(name string) string { return n.WakeDir + "/" + name }

// uidRingPrefix is omni_shm_ring_v1_{uid}_, the start of every ring
// directory and ring file name of uid.
func uidRingPrefix(uid int) string { return RingDirPrefix + strconv.Itoa(uid) + "_" }

// IsRingDirName reports whether name is a ring directory D of uid.
func IsRingDirName(uid int, name string) bool {
	rest, ok := strings.CutPrefix(name, uidRingPrefix(uid))
	return ok && len(rest) == hashDigits && IsHex(rest)
}

// RingFile is a ring file name split into its parts:
// {Dir}_{From}_{To}_{PID}_{ID}.
type RingFile struct {
	Dir, From, To string
	PID           int
	ID            string
}

// ParseRingName splits a ring file name of uid, or reports false for any
// name that is not one.
func ParseRingName(uid int, name string) (RingFile, bool) {
	p := uidRingPrefix(uid)
	if len(name) < len(p)+hashDigits+1 || !ValidRingName(uid, name) {
		return RingFile{}, false
	}
	dir := name[:len(p)+hashDigits]
	if !IsRingDirName(uid, dir) || name[len(dir)] != '_' {
		return RingFile{}, false
	}
	parts := strings.Split(name[len(dir)+1:], "_")
	if len(parts) != 4 || !IsNumeric(parts[0]) || !IsNumeric(parts[1]) || !IsNumeric(parts[2]) || parts[3] == "" || !IsHex(parts[3]) {
		return RingFile{}, false
	}
	pid, err := strconv.Atoi(parts[2])
	if err != nil || pid <= 0 {
		return RingFile{}, false
	}
	return RingFile{Dir: dir, From: parts[0], To: parts[1], PID: pid, ID: parts[3]}, true
}

// RingDirOfWakeDir is the ring directory name that belongs to the wake
// directory named wakeName (SPEC §2: D hashes the path of W), or false if
// wakeName is not a wake directory of uid.
func RingDirOfWakeDir(uid int, wakeName string) (string, bool) {
	rest, ok := strings.CutPrefix(wakeName, wakeDirPrefix+strconv.Itoa(uid)+"_")
	if !ok || rest == "" || strings.ContainsAny(rest, "/_") {
		return "", false
	}
	return uidRingPrefix(uid) + Hash(Path(wakeName)), true
}

// FIFOName is the name of a receiver's wake FIFO: {stage}_{id} (SPEC §8).
func FIFOName(stage, id string) string { return stage + "_" + id }

// TempFIFOName is where a receiver creates its FIFO before renaming it into
// place once its read end is open: producers match only "{stage}_*", so
// they never open it while it has no reader.
func TempFIFOName(id string) string { return tempFIFO + id }

// IsTempFIFO reports whether name is a receiver's temporary FIFO
// (TempFIFOName): one a receiver killed between creating and renaming it
// leaves behind, with no reader.
func IsTempFIFO(name string) bool {
	id, ok := strings.CutPrefix(name, tempFIFO)
	return ok && id != "" && IsHex(id)
}

// SleepersName is the name, in the wake directory, of the Go-only file in
// which the receiver of FIFO fifoName counts the goroutines asleep on it
// (package wake): .sleepers_{fifo name}. No producer's "{stage}_*" matches
// it; Python peers never look at it.
func SleepersName(fifoName string) string { return sleepersFile + fifoName }

// SleepersFIFO returns the FIFO name a sleepers file name belongs to (the
// inverse of SleepersName), or false if name is not one.
func SleepersFIFO(name string) (string, bool) {
	fifo, ok := strings.CutPrefix(name, sleepersFile)
	if _, isFIFO := FIFOStage(fifo); !ok || !isFIFO {
		return "", false
	}
	return fifo, true
}

// TempFIFOOf is the name a receiver creates FIFO fifoName under before it
// publishes it (TempFIFOName of the same id), or false if fifoName is not
// a FIFO name.
func TempFIFOOf(fifoName string) (string, bool) {
	_, id, ok := strings.Cut(fifoName, "_")
	if _, isFIFO := FIFOStage(fifoName); !ok || !isFIFO {
		return "", false
	}
	return TempFIFOName(id), true
}

// FIFOStage returns the stage of a wake FIFO name {stage}_{uuid4 hex}.
func FIFOStage(name string) (string, bool) {
	stage, id, ok := strings.Cut(name, "_")
	if !ok || !IsNumeric(stage) || id == "" || !IsHex(id) {
		return "", false
	}
	return stage, true
}

// IsStageFIFO reports whether a wake-directory entry is a FIFO name of
// stage as a producer matches it: the Python producer's pattern is the glob
// "{stage}_*", so "1_x" belongs to stage 1 and "12_x" does not.
func IsStageFIFO(name, stage string) bool {
	return len(name) > len(stage) && name[len(stage)] == '_' && strings.HasPrefix(name, stage)
}

// LockName is the name of key's lock file: shm_{key}_lockfile.lock (SPEC
// §6). The segment itself is named by the key.
func LockName(key string) string { return lockPrefix + key + lockSuffix }

// LockKey returns the key whose lock file is called name, if name is one.
// The key is not checked (see keys.Check).
func LockKey(name string) (string, bool) {
	if !strings.HasPrefix(name, lockPrefix) || !strings.HasSuffix(name, lockSuffix) ||
		len(name) <= len(lockPrefix)+len(lockSuffix) {
		return "", false
	}
	return name[len(lockPrefix) : len(name)-len(lockSuffix)], true
}

// IsHex reports whether s holds only hexadecimal digits.
func IsHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
