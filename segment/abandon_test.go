//go:build linux

package segment

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"

	"omnishm/internal/shmtest"
)

// What a crash watchdog needs of the per-key path: the names before the
// files exist, the identity before the bytes, and a rule for what a dead
// producer left that it never named by identity.

func TestPutHooksNameFilesBeforeTheyExist(t *testing.T) {
	const key = "hooked"
	dir, seg, lock := keyFiles(t, key)
	log := fileLog{paths: []string{lock, seg}}
	p := NewProducer(Options{
		Dir:        dir,
		WillCreate: func(path string) { log.look("will create " + path) },
		OnCreate:   func(path string) { log.look("created " + path) },
		OnRemove:   func(path string) { log.look("removed " + path) },
	})
	mustPut(t, p, key, []byte("payload"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	log.check(t,
		"will create "+seg, "no "+lock, "no "+seg,
		"created "+seg, lock+" size 0", seg+" size 0",
		"removed "+seg, lock+" size 0", "no "+seg,
	)
}

// fileLog records the hooks' events, each followed by what stands at each
// of paths then: "no PATH" or "PATH size N".
type fileLog struct {
	paths  []string
	events []string
}

func (l *fileLog) look(event string) {
	l.events = append(l.events, event)
	for _, path := range l.paths {
		if fi, err := os.Lstat(path); err != nil {
			l.events = append(l.events, "no "+path)
		} else {
			l.events = append(l.events, path+" size "+strconv.FormatInt(fi.Size(), 10))
		}
	}
}

func (l *fileLog) check(t *testing.T, want ...string) {
	t.Helper()
	if !slices.Equal(l.events, want) {
		t.Fatalf("hooks saw\n%q\nwant\n%q", l.events, want)
	}
}

// A Put that fails tells OnRemove that it left nothing at the path it
// announced.
func TestFailedPutForgetsItsAnnouncement(t *testing.T) {
	const key = "fails"
	dir, _, lock := keyFiles(t, key)
	if err := os.Mkdir(lock, 0o700); err != nil {
		t.Fatal(err)
	}
	var willCreate, removed []string
	p := NewProducer(Options{
		Dir:        dir,
		WillCreate: func(path string) { willCreate = append(willCreate, path) },
		OnRemove:   func(path string) { removed = append(removed, path) },
	})
	defer p.Close()
	if _, err := p.Put(key, []byte("x")); err == nil {
		t.Fatal("put with a directory as its lock file succeeded")
	}
	if want := []string{dir + "/" + key}; !slices.Equal(willCreate, want) || !slices.Equal(removed, want) {
		t.Fatalf("WillCreate %q, OnRemove %q, want %q for both", willCreate, removed, want)
	}
}

func TestRemoveAbandoned(t *testing.T) {
	const key = "k"
	type files struct{ seg, lock string }
	cases := []struct {
		name    string
		setup   func(t *testing.T, f files)
		removed []string // "seg", "lock"
		root    bool     // needs root to make a file of another uid
	}{
		{"lock file only: died before the segment", func(t *testing.T, f files) {
			shmtest.WriteFile(t, f.lock, nil)
		}, []string{"lock"}, false},
		{"empty segment: died before sizing it", func(t *testing.T, f files) {
			shmtest.WriteFile(t, f.lock, nil)
			shmtest.WriteFile(t, f.seg, nil)
		}, []string{"seg", "lock"}, false},
		{"a publication is beside the lock file", func(t *testing.T, f files) {
			shmtest.WriteFile(t, f.lock, nil)
			shmtest.WriteFile(t, f.seg, []byte("someone's"))
		}, nil, false},
		{"no lock file", func(t *testing.T, f files) {
			shmtest.WriteFile(t, f.seg, nil)
		}, nil, false},
		{"another process holds the lock", func(t *testing.T, f files) {
			shmtest.WriteFile(t, f.lock, nil)
			shmtest.WriteFile(t, f.seg, nil)
			l := shmtest.HoldLock(t, f.lock)
			t.Cleanup(func() { l.Release(t) })
		}, nil, false},
		{"the lock file is a symlink", func(t *testing.T, f files) {
			shmtest.WriteFile(t, f.lock+".target", nil)
			if err := os.Symlink(f.lock+".target", f.lock); err != nil {
				t.Fatal(err)
			}
		}, nil, false},
		{"a directory at the segment's name", func(t *testing.T, f files) {
			shmtest.WriteFile(t, f.lock, nil)
			if err := os.Mkdir(f.seg, 0o700); err != nil {
				t.Fatal(err)
			}
		}, nil, false},
		{"another user's lock file", func(t *testing.T, f files) {
			shmtest.Foreign(t, shmtest.WriteFile(t, f.lock, nil))
		}, nil, true},
		{"another user's empty segment", func(t *testing.T, f files) {
			shmtest.WriteFile(t, f.lock, nil)
			shmtest.Foreign(t, shmtest.WriteFile(t, f.seg, nil))
		}, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root to make a file of another uid")
			}
			dir, seg, lock := keyFiles(t, key)
			f := files{seg, lock}
			c.setup(t, f)
			var before []string
			for _, p := range []string{f.seg, f.lock} {
				if _, err := os.Lstat(p); err == nil {
					before = append(before, p)
				}
			}
			removed, err := RemoveAbandoned(dir, key)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, r := range c.removed {
				want = append(want, map[string]string{"seg": f.seg, "lock": f.lock}[r])
			}
			if !slices.Equal(removed, want) {
				t.Fatalf("removed %q, want %q", removed, want)
			}
			for _, p := range before {
				if slices.Contains(want, p) {
					shmtest.AssertAbsent(t, p)
				} else {
					shmtest.AssertPresent(t, p)
				}
			}
		})
	}
}

// Claim takes only this user's regular files: whatever else sits at a
// key's names is ErrUnsafe, nothing is read or removed, and nothing blocks.
func TestClaimRefusesUnsafeFiles(t *testing.T) {
	const key = "k"
	cases := []struct {
		name  string
		setup func(t *testing.T, seg, lock string)
		root  bool
	}{
		{"symlinked segment", func(t *testing.T, seg, lock string) {
			shmtest.WriteFile(t, seg+".target", []byte("their bytes"))
			os.Symlink(seg+".target", seg)
			shmtest.WriteFile(t, lock, nil)
		}, false},
		{"symlinked lock file", func(t *testing.T, seg, lock string) {
			shmtest.WriteFile(t, seg, []byte("bytes"))
			shmtest.WriteFile(t, lock+".target", nil)
			os.Symlink(lock+".target", lock)
		}, false},
		{"FIFO at the segment's name", func(t *testing.T, seg, lock string) {
			shmtest.Mkfifo(t, seg)
			shmtest.WriteFile(t, lock, nil)
		}, false},
		{"another user's segment", func(t *testing.T, seg, lock string) {
			shmtest.Foreign(t, shmtest.WriteFile(t, seg, []byte("their bytes")))
			shmtest.WriteFile(t, lock, nil)
		}, true},
		{"another user's lock file", func(t *testing.T, seg, lock string) {
			shmtest.WriteFile(t, seg, []byte("bytes"))
			shmtest.Foreign(t, shmtest.WriteFile(t, lock, nil))
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root to make a file of another uid")
			}
			dir, seg, lock := keyFiles(t, key)
			c.setup(t, seg, lock)
			entries, _ := os.ReadDir(dir)
			data, ok, err := Claim(dir, key)
			if ok || data != nil || !errors.Is(err, ErrUnsafe) {
				t.Fatalf("Claim = %q, %v, %v; want ErrUnsafe", data, ok, err)
			}
			if after, _ := os.ReadDir(dir); len(after) != len(entries) {
				t.Fatalf("files before %v, after %v", entries, after)
			}
		})
	}
}

// A Claimer names the segment to a crash watchdog for exactly the window
// in which the receiver's death would leave its lock file behind.
func TestClaimerHooksSpanTheUnlinks(t *testing.T) {
	const key = "claimed"
	dir, seg, lock := keyFiles(t, key)
	log := fileLog{paths: []string{seg, lock}}
	c := Claimer{
		Dir:        dir,
		WillRemove: func(path string) { log.look("will remove " + path) },
		OnRemove:   func(path string) { log.look("removed " + path) },
	}
	if _, ok, err := c.Claim(key); ok || err != nil || len(log.events) > 0 {
		t.Fatalf("a miss: ok=%v err=%v hooks %q", ok, err, log.events)
	}
	p := NewProducer(Options{Dir: dir})
	defer p.Close()
	mustPut(t, p, key, []byte("payload"))
	if data, ok, err := c.Claim(key); !ok || err != nil || string(data) != "payload" {
		t.Fatalf("claim: %q ok=%v err=%v", data, ok, err)
	}
	log.check(t,
		"will remove "+seg, seg+" size 7", lock+" size 0",
		"removed "+seg, "no "+seg, "no "+lock,
	)
}
