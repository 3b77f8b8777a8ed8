package wake

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// The wake directory is 0700 and a FIFO 0600 whatever the umask (SPEC §8),
// and an existing directory of another user is refused, not used.
func TestModesAndForeignDir(t *testing.T) {
	old := unix.Umask(0)
	dir := wakeDir(t)
	r, err := OpenReceiver(dir, "1")
	unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for path, want := range map[string]uint32{dir: unix.S_IFDIR | 0o700, r.path: unix.S_IFIFO | 0o600} {
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil || st.Mode != want {
			t.Errorf("%s: mode %#o (%v), want %#o", path, st.Mode, err, want)
		}
	}

	if os.Geteuid() != 0 {
		t.Skip("needs root to make a directory of another uid")
	}
	foreign := wakeDir(t)
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(foreign)
	if err := os.Chown(foreign, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if r, err := OpenReceiver(foreign, "1"); !errors.Is(err, ErrUnsafeDir) {
		if err == nil {
			r.Close()
		}
		t.Fatalf("OpenReceiver in another uid's directory: %v, want ErrUnsafeDir", err)
	}
	if names, _ := os.ReadDir(foreign); len(names) != 0 {
		t.Fatalf("files created in another uid's directory: %v", names)
	}
}
