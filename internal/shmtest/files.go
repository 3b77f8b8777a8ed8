//go:build linux

package shmtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// Fixtures for files in a shared directory: payload bytes, dated files,
// files another user could plant, and checks that files are there or gone.

// ForeignUID owns the files tests make "of another user" (only root can).
const ForeignUID = 12345

// Payload returns size deterministic pseudo-random bytes for seed, so a
// child process can make the same bytes from (size, seed) without
// shipping them.
func Payload(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Digest is the hex SHA-256 of b: what a child says of bytes it read.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// WriteFile creates path (mode 0600) holding data and returns path.
func WriteFile(t testing.TB, path string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Mkfifo creates a FIFO (mode 0600) at path and returns path.
func Mkfifo(t testing.TB, path string) string {
	t.Helper()
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteFileAt is WriteFile for a file last modified at mtime, as one a
// crashed process left behind a while ago.
func WriteFileAt(t testing.TB, path string, data []byte, mtime time.Time) string {
	t.Helper()
	WriteFile(t, path, data)
	SetMtime(t, path, mtime)
	return path
}

// SetMtime sets the access and modification times of path to mtime, of a
// symlink itself rather than what it points at.
func SetMtime(t testing.TB, path string, mtime time.Time) {
	t.Helper()
	ts := unix.NsecToTimespec(mtime.UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}

// Foreign gives paths to ForeignUID. It reports false, changing nothing,
// when the test does not run as root.
func Foreign(t testing.TB, paths ...string) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	for _, p := range paths {
		if err := os.Lchown(p, ForeignUID, ForeignUID); err != nil {
			t.Fatal(err)
		}
	}
	return true
}

// Planted makes in dir what another user can plant in a sticky shared
// directory, all last modified at mtime: at each of links, a symlink to the
// file dir/target; and, when the test runs as root, at each of foreign, an
// empty file of ForeignUID. It returns every path it made, for the test to
// check that a sweep left them (and what the links point at) alone.
func Planted(t testing.TB, dir string, mtime time.Time, links, foreign []string) []string {
	t.Helper()
	target := WriteFileAt(t, filepath.Join(dir, "target"), nil, mtime)
	made := []string{target}
	for _, name := range links {
		link := filepath.Join(dir, name)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		SetMtime(t, link, mtime)
		made = append(made, link)
	}
	if os.Geteuid() == 0 {
		for _, name := range foreign {
			p := WriteFileAt(t, filepath.Join(dir, name), nil, mtime)
			Foreign(t, p)
			made = append(made, p)
		}
	}
	return made
}

// KeyFiles returns the per-key segment and lock file of key in dir
// (SPEC §6).
func KeyFiles(dir, key string) []string {
	return []string{filepath.Join(dir, key), filepath.Join(dir, scope.LockName(key))}
}

// Absent reports whether none of paths exists (links are not followed):
// the condition to wait for with Eventually while another process removes
// them.
func Absent(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}

// AssertAbsent fails the test (and goes on) for each of paths that exists.
func AssertAbsent(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (%v)", p, err)
		}
	}
}

// AssertPresent fails the test (and goes on) for each of paths that does
// not exist.
func AssertPresent(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s missing: %v", p, err)
		}
	}
}
