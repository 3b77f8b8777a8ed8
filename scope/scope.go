// Package scope owns every name omnishm gives a file in /dev/shm: the wake
// directory and its FIFOs, the ring directory, ring files and their markers
// (derived from a deployment's wakeup scope, SPEC §2, §8), and per-key
// segments and their lock files (SPEC §6). It builds each name and parses
// it back; no other package spells one out. It is pure: it touches no file.
package scope

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// ShmDir is where POSIX shared memory lives on Linux.
const ShmDir = "/dev/shm"

// RingDirPrefix starts every ring directory name: the protocol version.
const RingDirPrefix = "omni_shm_ring_v1_"

// Names are the paths of one deployment scope.
type Names struct {
	// WakeDir is the wakeup-FIFO directory W.
	WakeDir string
	// RingDirName is D, the ring directory's name inside ShmDir; ring files
	// are ShmDir/D_{from}_{to}_{pid}_{uuid} and their markers ShmDir/D/{same}.
	RingDirName string
}

// New returns the names for a wakeup scope. An empty scope means "no scope":
// the names are keyed by the parent process id, as the Python side does.
func New(wakeupScope string) Names {
	return ForUID(os.Getuid(), wakeupScope, os.Getppid())
}

// ForUID is New for an explicit uid and parent pid (used by tools and tests).
func ForUID(uid int, wakeupScope string, ppid int) Names {
	var wake string
	if wakeupScope != "" {
		wake = fmt.Sprintf("%s/%s%d_%s", ShmDir, wakeDirPrefix, uid, Hash(wakeupScope))
	} else {
		wake = fmt.Sprintf("%s/%s%d_%d", ShmDir, wakeDirPrefix, uid, ppid)
	}
	return Names{WakeDir: wake, RingDirName: uidRingPrefix(uid) + Hash(wake)}
}

// RingDir is the ring directory's path.
func (n Names) RingDir() string { return ShmDir + "/" + n.RingDirName }

// RingPrefix starts the name of every ring file of this scope.
func (n Names) RingPrefix() string { return n.RingDirName + "_" }

// EdgePrefix starts the name of every ring file of one edge.
func (n Names) EdgePrefix(from, to string) string {
	return n.RingDirName + "_" + from + "_" + to + "_"
}

// Hash is H(s) of SPEC §2: the first 24 hex digits of SHA-256 of s.
func Hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:hashDigits]
}

// ValidRingName reports whether name may be a ring file of this uid: it
// starts with omni_shm_ring_v1_{uid}_ and is alphanumeric apart from '_'.
// Readers check it before opening any path named by a peer or a descriptor.
func ValidRingName(uid int, name string) bool {
	if !strings.HasPrefix(name, uidRingPrefix(uid)) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '_' && !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// IsNumeric reports whether a stage id is a non-empty string of ASCII
// digits: only such edges use the ring and wakeups (SPEC §8, §9).
func IsNumeric(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
