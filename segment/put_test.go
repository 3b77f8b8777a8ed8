//go:build linux

package segment

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/keys"
)

// Put and Claim: the payload crosses processes intact, exactly one receiver
// gets it, a bad or empty publication touches nothing, and errors name the
// failing file.

func TestKeys(t *testing.T) {
	good := []string{"req_0_1", "a.b-c~", "..a", strings.Repeat("k", 237), "ünïcode-κλειδί"}
	bad := []string{
		"", ".", "..", "a/b", "../etc/passwd", "/abs", "nul\x00byte", "not-utf8-\xff",
		strings.Repeat("k", 238), // lock file name would be 256 bytes
		strings.Repeat("k", 256),
	}
	dir := t.TempDir()
	p := NewProducer(Options{Dir: dir})
	defer p.Close()
	for _, key := range good {
		mustPut(t, p, key, []byte(key))
		if got := mustClaim(t, dir, key); string(got) != key {
			t.Errorf("%q: claimed %q", keys.Shorten(key), got)
		}
	}
	for _, key := range bad {
		if _, err := p.Put(key, []byte{1}); !errors.Is(err, keys.ErrBadKey) {
			t.Errorf("Put(%q) = %v, want keys.ErrBadKey", keys.Shorten(key), err)
		}
		if _, _, err := Claim(dir, key); !errors.Is(err, keys.ErrBadKey) {
			t.Errorf("Claim(%q) = %v, want keys.ErrBadKey", keys.Shorten(key), err)
		}
		if ok, err := p.Cleanup(key); ok || !errors.Is(err, keys.ErrBadKey) {
			t.Errorf("Cleanup(%q) = %v, %v, want keys.ErrBadKey", keys.Shorten(key), ok, err)
		}
		if _, err := p.Claimed(descriptor.ShmHandle{Name: key, Size: 1}); !errors.Is(err, keys.ErrBadKey) {
			t.Errorf("Claimed(%q) = %v, want keys.ErrBadKey", keys.Shorten(key), err)
		}
	}
	// The good keys were claimed; the bad ones touched nothing.
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files left: %v", entries)
	}
}

func TestPutInOneProcessClaimInAnother(t *testing.T) {
	for _, size := range []int{1, 512, 1 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			key := shmtest.Key("xproc")
			child := shmtest.Start(t, "put", key, strconv.Itoa(size), "7")
			child.Expect(t, wait, "put")
			got := mustClaim(t, "", key)
			if !bytes.Equal(got, shmtest.Payload(size, 7)) {
				t.Fatalf("claimed %d bytes that differ from the %d put", len(got), size)
			}
			keyGone(t, DefaultDir, key)
			if _, ok, err := Claim("", key); ok || err != nil {
				t.Fatalf("second claim: ok=%v err=%v", ok, err)
			}
			child.Send(t, "close")
			child.Exited(t, wait)

			// And the other way round: this process puts, a child claims.
			key = shmtest.Key("xproc")
			p := newProducer(t)
			data := shmtest.Payload(size, 8)
			d := mustPut(t, p, key, data)
			if d != (descriptor.ShmHandle{Name: key, Size: size}) {
				t.Fatalf("descriptor %+v", d)
			}
			var st unix.Stat_t
			if err := unix.Stat(DefaultDir+"/"+key, &st); err != nil || st.Size != int64(size) || st.Mode&0o777 != 0o600 {
				t.Fatalf("segment stat: size %d mode %o err %v", st.Size, st.Mode&0o777, err)
			}
			reader := shmtest.Start(t, "claim")
			reader.Send(t, key)
			if l := reader.Line(t, wait); l != "got "+shmtest.Digest(data) {
				t.Fatalf("child claim: %s", l)
			}
			keyGone(t, DefaultDir, key)
		})
	}
}

func TestTwoReceiverProcessesClaimExactlyOnce(t *testing.T) {
	p := newProducer(t)
	a, b := shmtest.Start(t, "claim"), shmtest.Start(t, "claim")
	for round := range 20 {
		key := shmtest.Key("race")
		data := shmtest.Payload(4096, uint64(round))
		mustPut(t, p, key, data)
		a.Send(t, key)
		b.Send(t, key)
		answers := []string{a.Line(t, wait), b.Line(t, wait)}
		got, miss := 0, 0
		for _, l := range answers {
			switch l {
			case "got " + shmtest.Digest(data):
				got++
			case "miss":
				miss++
			default:
				t.Fatalf("round %d: child said %q", round, l)
			}
		}
		if got != 1 || miss != 1 {
			t.Fatalf("round %d: %v, want exactly one claim", round, answers)
		}
		keyGone(t, DefaultDir, key)
	}
}

func TestConcurrentPutsAndClaims(t *testing.T) {
	p := newProducer(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				key := shmtest.Key("conc")
				data := shmtest.Payload(100+i, uint64(g*100+i))
				if _, err := p.Put(key, data); err != nil {
					t.Error(err)
					return
				}
				got, ok, err := Claim("", key)
				if err != nil || !ok || !bytes.Equal(got, data) {
					t.Errorf("%s: ok=%v err=%v", key, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestEmptyPayloadRefused(t *testing.T) {
	dir := t.TempDir()
	p := NewProducer(Options{Dir: dir})
	defer p.Close()
	if _, err := p.Put(shmtest.Key("empty"), nil); err == nil {
		t.Fatal("empty payload accepted")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("empty put created files: %v", entries)
	}
}

func TestFailedPutLeavesNothing(t *testing.T) {
	key := shmtest.Key("putfail")
	child := shmtest.Start(t, "putfail", key, "4096")
	if l := child.Line(t, wait); !strings.Contains(l, "file too large") {
		t.Fatalf("put over the size limit: %q, want EFBIG", l)
	}
	child.Exited(t, wait)
	keyGone(t, DefaultDir, key)
}

// The zero Producer publishes into DefaultDir.
func TestZeroProducer(t *testing.T) {
	var p Producer
	key := shmtest.Key("zero")
	d := mustPut(t, &p, key, []byte("zero value"))
	if !p.Pending(key) {
		t.Fatal("not pending")
	}
	if got := mustClaim(t, "", d.Name); string(got) != "zero value" {
		t.Fatalf("claimed %q", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	keyGone(t, DefaultDir, key)
}

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
