//go:build linux

package segment

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"omnishm/internal/shmtest"
)

// Errors say the operation and name the failing file once; callers add the
// key. The errno stays visible to errors.Is.
func TestErrorsNameTheFileOnce(t *testing.T) {
	const key = "k"
	dir, seg, lock := keyFiles(t, key)
	// A directory where a file should be fails the same way as any user.
	mkdir := func(t *testing.T, path string) {
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	put := func() error {
		_, err := NewProducer(Options{Dir: dir}).Put(key, []byte("x"))
		return err
	}
	claim := func() error {
		_, _, err := Claim(dir, key)
		return err
	}
	cases := []struct {
		name   string
		setup  func(t *testing.T)
		run    func() error
		prefix string // the whole message up to the cause
		cause  error
	}{
		{"put, lock file is a directory", func(t *testing.T) { mkdir(t, lock) },
			put, "segment: put: open " + lock + ": ", syscall.EISDIR},
		{"put, segment is a directory", func(t *testing.T) { mkdir(t, seg) },
			put, "segment: put: replace " + seg + ": ", syscall.EISDIR},
		{"claim, lock file is a directory", func(t *testing.T) {
			shmtest.WriteFile(t, seg, []byte("x"))
			mkdir(t, lock)
		}, claim, "segment: claim: open " + lock + ": ", syscall.EISDIR},
		{"claim, corrupt", func(t *testing.T) {
			shmtest.WriteFile(t, seg, []byte("OMNIIPC1 short"))
			shmtest.WriteFile(t, lock, nil)
		}, claim, "segment: claim: unwrap " + seg + ": corrupt segment: ", ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.setup(t)
			defer os.Remove(seg)
			defer os.Remove(lock)
			err := c.run()
			if err == nil || !strings.HasPrefix(err.Error(), c.prefix) || !errors.Is(err, c.cause) {
				t.Fatalf("error %v, want %q... wrapping %v", err, c.prefix, c.cause)
			}
			if n := strings.Count(err.Error(), dir+"/"); n != 1 {
				t.Fatalf("error %q names a file %d times", err, n)
			}
		})
	}
}
