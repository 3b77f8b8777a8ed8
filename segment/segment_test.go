package segment

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/keys"
	"omnishm/scope"
)

const wait = 20 * time.Second

func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{
		"put":       rolePut,
		"claim":     roleClaim,
		"transfers": roleTransfers,
		"putfail":   rolePutFail,
	})
}

// childFailed reports a child role's failure on stderr, which the test
// binary shows, and as its exit status.
func childFailed(err error) int {
	fmt.Fprintln(os.Stderr, "child:", err)
	return 1
}

// payload is size deterministic pseudo-random bytes, so a child can make
// the same bytes from (size, seed) without shipping them.
func payload(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// rolePut publishes one payload (args: key size seed) from a child process,
// then closes its producer when the parent says so.
func rolePut(args []string) int {
	size, _ := strconv.Atoi(args[1])
	seed, _ := strconv.ParseUint(args[2], 10, 64)
	p := NewProducer(Options{})
	if _, err := p.Put(args[0], payload(size, seed)); err != nil {
		return childFailed(err)
	}
	shmtest.Say("put")
	shmtest.Hear()
	if err := p.Close(); err != nil {
		return childFailed(err)
	}
	// Report by exit status: a last line may be lost when the child exits
	// (shmtest reads stdout while exec.Cmd.Wait closes it).
	return 0
}

// rolePutFail puts args[1] bytes under key args[0] with a file size limit
// of 1 KiB, so that writing the segment fails half-way (EFBIG), and reports
// the error.
func rolePutFail(args []string) int {
	size, _ := strconv.Atoi(args[1])
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 1024, Max: 1024}); err != nil {
		return childFailed(err)
	}
	p := NewProducer(Options{})
	defer p.Close()
	_, err := p.Put(args[0], payload(size, 1))
	shmtest.Say("%v", err)
	return 0
}

// roleClaim claims each key the parent sends and answers with the payload's
// digest, "miss" or the error.
func roleClaim([]string) int {
	for {
		key := shmtest.Hear()
		if key == "" {
			return 0
		}
		data, ok, err := Claim("", key)
		switch {
		case err != nil:
			shmtest.Say("err %v", err)
		case !ok:
			shmtest.Say("miss")
		default:
			shmtest.Say("got %s", digest(data))
		}
	}
}

// assertGone fails unless key's segment and lock file are both absent.
func assertGone(t *testing.T, dir, key string) {
	t.Helper()
	for _, path := range []string{dir + "/" + key, dir + "/" + scope.LockName(key)} {
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there (err %v)", path, err)
		}
	}
}

func assertPresent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("%s missing: %v", path, err)
	}
}

func mustPut(t *testing.T, p *Producer, key string, data []byte) descriptor.ShmHandle {
	t.Helper()
	d, err := p.Put(key, data)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustClaim(t *testing.T, dir, key string) []byte {
	t.Helper()
	data, ok, err := Claim(dir, key)
	if err != nil || !ok {
		t.Fatalf("claim %q: ok=%v err=%v", key, ok, err)
	}
	return data
}

func TestBadKeysTouchNothing(t *testing.T) {
	cases := []struct {
		key string
		ok  bool
	}{
		{"req_0_1", true},
		{"a.b-c~", true},
		{"..a", true},
		{strings.Repeat("k", 237), true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"../etc/passwd", false},
		{"/abs", false},
		{"nul\x00byte", false},
		{"not-utf8-\xff", false},
		{"ünïcode-κλειδί", true},
		{strings.Repeat("k", 238), false}, // lock file name would be 256 bytes
		{strings.Repeat("k", 256), false},
	}
	dir := t.TempDir()
	p := NewProducer(Options{Dir: dir})
	defer p.Close()
	for _, c := range cases {
		if c.ok {
			continue
		}
		if _, err := p.Put(c.key, []byte{1}); !errors.Is(err, keys.ErrBadKey) {
			t.Errorf("Put(%q) = %v, want keys.ErrBadKey", keys.Shorten(c.key), err)
		}
		if _, _, err := Claim(dir, c.key); !errors.Is(err, keys.ErrBadKey) {
			t.Errorf("Claim(%q) = %v, want keys.ErrBadKey", keys.Shorten(c.key), err)
		}
		if p.Cleanup(c.key) {
			t.Errorf("Cleanup(%q) reported a retirement", keys.Shorten(c.key))
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("bad keys created files: %v", entries)
	}
}

func TestPutInOneProcessClaimInAnother(t *testing.T) {
	for _, size := range []int{1, 512, 1 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			key := shmtest.Key("xproc")
			child := shmtest.Start(t, "put", key, strconv.Itoa(size), "7")
			if l := child.Line(t, wait); l != "put" {
				t.Fatalf("producer: %s", l)
			}
			got := mustClaim(t, "", key)
			if !bytes.Equal(got, payload(size, 7)) {
				t.Fatalf("claimed %d bytes that differ from the %d put", len(got), size)
			}
			assertGone(t, DefaultDir, key)
			if _, ok, err := Claim("", key); ok || err != nil {
				t.Fatalf("second claim: ok=%v err=%v", ok, err)
			}
			child.Send(t, "close")
			if err := child.Wait(t, wait); err != nil {
				t.Fatal(err)
			}

			// And the other way round: this process puts, a child claims.
			key = shmtest.Key("xproc")
			p := NewProducer(Options{})
			defer p.Close()
			data := payload(size, 8)
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
			if l := reader.Line(t, wait); l != "got "+digest(data) {
				t.Fatalf("child claim: %s", l)
			}
			assertGone(t, DefaultDir, key)
		})
	}
}

func TestTwoReceiverProcessesClaimExactlyOnce(t *testing.T) {
	p := NewProducer(Options{})
	defer p.Close()
	a, b := shmtest.Start(t, "claim"), shmtest.Start(t, "claim")
	for round := range 20 {
		key := shmtest.Key("race")
		data := payload(4096, uint64(round))
		mustPut(t, p, key, data)
		a.Send(t, key)
		b.Send(t, key)
		answers := []string{a.Line(t, wait), b.Line(t, wait)}
		got, miss := 0, 0
		for _, l := range answers {
			switch l {
			case "got " + digest(data):
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
		assertGone(t, DefaultDir, key)
	}
}

func TestReputReplacesUnclaimed(t *testing.T) {
	var created, removed []string
	var mu sync.Mutex
	p := NewProducer(Options{
		OnCreate: func(s string) { mu.Lock(); created = append(created, s); mu.Unlock() },
		OnRemove: func(s string) { mu.Lock(); removed = append(removed, s); mu.Unlock() },
	})
	defer p.Close()
	key := shmtest.Key("reput")
	mustPut(t, p, key, []byte("first, and longer"))
	mustPut(t, p, key, []byte("second"))
	reader := shmtest.Start(t, "claim")
	reader.Send(t, key)
	if l := reader.Line(t, wait); l != "got "+digest([]byte("second")) {
		t.Fatalf("receiver: %s, want the second value", l)
	}
	assertGone(t, DefaultDir, key)
	path := DefaultDir + "/" + key
	mu.Lock()
	if fmt.Sprint(created) != fmt.Sprint([]string{path, path}) || fmt.Sprint(removed) != fmt.Sprint([]string{path}) {
		t.Fatalf("hooks: created %v removed %v", created, removed)
	}
	mu.Unlock()
	// The next put's sweep learns that the key was consumed.
	other := shmtest.Key("reput-other")
	mustPut(t, p, other, []byte{1})
	if p.Pending(key) || !p.Pending(other) {
		t.Fatalf("pending after sweep: %v %v", p.Pending(key), p.Pending(other))
	}
	mu.Lock()
	if len(removed) != 2 || removed[1] != path {
		t.Fatalf("consumed key not reported removed: %v", removed)
	}
	mu.Unlock()
}

func TestHeldLockIsAMissThenClaims(t *testing.T) {
	p := NewProducer(Options{})
	defer p.Close()
	key := shmtest.Key("held")
	mustPut(t, p, key, []byte("payload"))
	holder := shmtest.HoldLock(t, DefaultDir+"/"+scope.LockName(key))
	if data, ok, err := Claim("", key); ok || err != nil || data != nil {
		t.Fatalf("claim under another process's lock: %q ok=%v err=%v", data, ok, err)
	}
	assertPresent(t, DefaultDir+"/"+key)
	holder.Release(t)
	if got := mustClaim(t, "", key); string(got) != "payload" {
		t.Fatalf("claimed %q", got)
	}
	assertGone(t, DefaultDir, key)
}

// blockedOn reports whether some process waits in flock on the file with
// inode ino (a "->" line of /proc/locks ends in maj:min:ino).
func blockedOn(ino uint64) bool {
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	suffix := ":" + strconv.FormatUint(ino, 10)
	for _, line := range strings.Split(string(locks), "\n") {
		f := strings.Fields(line)
		if len(f) >= 7 && f[1] == "->" && strings.HasSuffix(f[6], suffix) {
			return true
		}
	}
	return false
}

func TestPutReopensALockFileRemovedWhileItWaited(t *testing.T) {
	if _, err := os.Stat("/proc/locks"); err != nil {
		t.Skip("no /proc/locks to see the producer wait")
	}
	var created int
	p := NewProducer(Options{OnCreate: func(string) { created++ }})
	defer p.Close()
	key := shmtest.Key("reopen")
	lockPath := DefaultDir + "/" + scope.LockName(key)
	if err := os.WriteFile(lockPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(lockPath, &st); err != nil {
		t.Fatal(err)
	}
	holder := shmtest.HoldLock(t, lockPath)
	done := make(chan error, 1)
	go func() {
		_, err := p.Put(key, []byte("after the wait"))
		done <- err
	}()
	shmtest.Eventually(t, wait, "the producer to wait on the lock", func() bool { return blockedOn(st.Ino) })
	holder.ReleaseUnlinking(t)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var now unix.Stat_t
	if err := unix.Stat(lockPath, &now); err != nil || now.Ino == st.Ino {
		t.Fatalf("lock file not recreated: ino %d -> %d (%v)", st.Ino, now.Ino, err)
	}
	if got := mustClaim(t, "", key); string(got) != "after the wait" || created != 1 {
		t.Fatalf("claimed %q, %d creations", got, created)
	}
	assertGone(t, DefaultDir, key)
}

func TestCleanupAndPrefix(t *testing.T) {
	p := NewProducer(Options{})
	defer p.Close()
	base := shmtest.Key("cancel")
	for _, k := range []string{"req_0_0", "req_0_1", "req_0_10other", "request_0_0"} {
		mustPut(t, p, base+k, []byte(k))
	}
	if n := p.CleanupPrefix(base + "req_0_"); n != 2 {
		t.Fatalf("CleanupPrefix retired %d, want 2", n)
	}
	for _, k := range []string{"req_0_0", "req_0_1"} {
		assertGone(t, DefaultDir, base+k)
		if p.Pending(base + k) {
			t.Errorf("%s still pending", k)
		}
	}
	for _, k := range []string{"req_0_10other", "request_0_0"} {
		if !p.Pending(base + k) {
			t.Errorf("%s no longer pending", k)
		}
		if got := mustClaim(t, "", base+k); string(got) != k {
			t.Errorf("%s: claimed %q", k, got)
		}
	}

	key := shmtest.Key("cleanup")
	mustPut(t, p, key, []byte("x"))
	if !p.Cleanup(key) {
		t.Fatal("cleanup of a pending key reported nothing retired")
	}
	assertGone(t, DefaultDir, key)
	if p.Cleanup(key) {
		t.Fatal("second cleanup reported a retirement")
	}
	// A consumed key: nothing left to retire.
	mustPut(t, p, key, []byte("y"))
	mustClaim(t, "", key)
	if p.Cleanup(key) {
		t.Fatal("cleanup of a consumed key reported a retirement")
	}
	assertGone(t, DefaultDir, key)
	// Another producer's publication is not ours to retire.
	other := NewProducer(Options{})
	defer other.Close()
	mustPut(t, other, key, []byte("z"))
	if p.Cleanup(key) || p.CleanupPrefix(key[:len(key)-1]) != 0 {
		t.Fatal("retired a key this producer did not publish")
	}
	assertPresent(t, DefaultDir+"/"+key)
}

func TestPendingRotation(t *testing.T) {
	s := newPendingSet()
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		s.add(k, fileID{ino: uint64(k[0])})
	}
	s.add("a", fileID{ino: 1}) // present: keeps its place, takes the new identity
	consumed := map[string]bool{"b": true, "e": true}
	keep := func(k string, id fileID) bool {
		if k == "a" && id.ino != 1 {
			t.Errorf("a kept identity %v", id)
		}
		return !consumed[k]
	}
	if got := s.rotate(3, keep); fmt.Sprint(got) != "[b]" {
		t.Fatalf("first batch dropped %v", got)
	}
	// a and c went to the back: d and e come first now.
	if got := s.keys(nil); fmt.Sprint(got) != "[d e a c]" {
		t.Fatalf("order %v", got)
	}
	if got := s.rotate(10, keep); fmt.Sprint(got) != "[e]" || s.len() != 3 {
		t.Fatalf("second batch dropped %v, %d left", got, s.len())
	}
	if _, ok := s.remove("a"); !ok {
		t.Fatal("remove")
	}
	if _, ok := s.remove("a"); ok || s.has("a") {
		t.Fatal("remove")
	}
}

func TestCloseRetiresEverythingOnce(t *testing.T) {
	var removed []string
	var mu sync.Mutex
	p := NewProducer(Options{OnRemove: func(s string) { mu.Lock(); removed = append(removed, s); mu.Unlock() }})
	keys := []string{shmtest.Key("close"), shmtest.Key("close"), shmtest.Key("close")}
	for _, k := range keys {
		mustPut(t, p, k, []byte(k))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		assertGone(t, DefaultDir, k)
		if p.Pending(k) {
			t.Errorf("%s pending after close", k)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if len(removed) != 3 {
		t.Fatalf("OnRemove saw %v", removed)
	}
	k := shmtest.Key("close")
	if _, err := p.Put(k, []byte{1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	assertGone(t, DefaultDir, k)
}

func TestSweepOrphans(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * OrphanGrace)
	touch := func(name string, mtime time.Time) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
		if err := unix.UtimesNano(path, ts); err != nil {
			t.Fatal(err)
		}
		return path
	}
	orphan := touch(scope.LockName("orphan"), old)
	young := touch(scope.LockName("young"), time.Now())
	live := touch(scope.LockName("live"), old)
	touch("live", old)
	held := touch(scope.LockName("held"), old)
	stranger := touch("shm_x_lockfile", old)

	holder := shmtest.HoldLock(t, held)
	removed, err := SweepOrphans(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != orphan {
		t.Fatalf("removed %v, want only %s", removed, orphan)
	}
	for _, path := range []string{young, live, held, stranger} {
		assertPresent(t, path)
	}
	holder.Release(t)
	// Released and still old: now it is an orphan. A shorter grace takes
	// the young one as well.
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	if err := unix.UtimesNano(young, ts); err != nil {
		t.Fatal(err)
	}
	removed, err = SweepOrphans(dir, time.Minute)
	if err != nil || len(removed) != 2 {
		t.Fatalf("second sweep removed %v (%v), want held and young", removed, err)
	}
	assertPresent(t, live)
}

func TestWrappedSegment(t *testing.T) {
	body := payload(1000, 3)
	bad := wrap(body)
	bad[16] ^= 1
	cases := []struct {
		name    string
		content []byte
		want    []byte
	}{
		{"plain", body, body},
		{"wrapped", wrap(body), body},
		{"wrapped empty body", wrap(nil), []byte{}},
		{"bad crc", bad, nil},
		{"short header", []byte("OMNIIPC1\x00\x00"), nil},
		{"long length", append(wrap(body)[:19:19], 0, 1), nil},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := shmtest.Key("wrapped")
			// Play the Python producer: segment bytes and lock file.
			if err := os.WriteFile(dir+"/"+key, c.content, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dir+"/"+scope.LockName(key), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			got, ok, err := Claim(dir, key)
			if c.want == nil {
				if !errors.Is(err, ErrCorrupt) || ok || got != nil {
					t.Fatalf("got %d bytes ok=%v err=%v, want ErrCorrupt", len(got), ok, err)
				}
			} else if err != nil || !ok || !bytes.Equal(got, c.want) {
				t.Fatalf("got %d bytes ok=%v err=%v", len(got), ok, err)
			}
			assertGone(t, dir, key)
		})
	}
}

// wrap returns payload in the OMNIIPC1 form, as the wrapping Python build
// writes it (producers here write the plain form).
func wrap(payload []byte) []byte {
	out := make([]byte, wrapHeader+len(payload))
	copy(out, wrapMagic)
	binary.BigEndian.PutUint64(out[8:16], uint64(len(payload)))
	binary.BigEndian.PutUint32(out[16:20], crc32.ChecksumIEEE(payload))
	copy(out[wrapHeader:], payload)
	return out
}

func TestUnwrap(t *testing.T) {
	body := []byte("\x82\xa1a\x01\xa1b\xc3")
	w := wrap(body)
	if len(w) != 20+len(body) || string(w[:8]) != "OMNIIPC1" {
		t.Fatalf("wrap header % x", w[:20])
	}
	for i := 8; i < len(w); i++ {
		c := bytes.Clone(w)
		c[i] ^= 0x40
		if _, err := unwrap(c); !errors.Is(err, ErrCorrupt) {
			t.Errorf("flipped byte %d accepted: %v", i, err)
		}
	}
	for n := 0; n < len(w); n++ {
		if _, err := unwrap(w[:n]); n >= 8 && !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated to %d accepted: %v", n, err)
		}
	}
	if got, err := unwrap(w); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("unwrap: %q %v", got, err)
	}
}

func FuzzUnwrap(f *testing.F) {
	f.Add([]byte("plain"))
	f.Add(wrap([]byte("body")))
	f.Add(wrap(nil))
	f.Add([]byte("OMNIIPC1"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := unwrap(raw)
		if !bytes.HasPrefix(raw, []byte(wrapMagic)) {
			if err != nil || !bytes.Equal(got, raw) {
				t.Fatalf("plain bytes changed: %v", err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || got != nil {
				t.Fatalf("error %v with %d bytes", err, len(got))
			}
			return
		}
		if !bytes.Equal(wrap(got), raw) {
			t.Fatal("accepted a header that does not describe its body")
		}
	})
}

func TestConcurrentPutsAndClaims(t *testing.T) {
	p := NewProducer(Options{})
	defer p.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				key := shmtest.Key("conc")
				data := payload(100+i, uint64(g*100+i))
				if _, err := p.Put(key, data); err != nil {
					errs <- err
					return
				}
				got, ok, err := Claim("", key)
				if err != nil || !ok || !bytes.Equal(got, data) {
					errs <- fmt.Errorf("%s: ok=%v err=%v", key, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestEmptyPayloadRefused(t *testing.T) {
	p := NewProducer(Options{Dir: t.TempDir()})
	defer p.Close()
	if _, err := p.Put(shmtest.Key("empty"), nil); err == nil {
		t.Fatal("empty payload accepted")
	}
}

func TestFailedPutLeavesNothing(t *testing.T) {
	key := shmtest.Key("putfail")
	child := shmtest.Start(t, "putfail", key, "4096")
	if l := child.Line(t, wait); !strings.Contains(l, "file too large") {
		t.Fatalf("put over the size limit: %q, want EFBIG", l)
	}
	if err := child.Wait(t, wait); err != nil {
		t.Fatal(err)
	}
	assertGone(t, DefaultDir, key)
}

// A producer retires only the segment it wrote: once a receiver claimed it
// and another process published the key again, Cleanup and Close leave
// that publication and its lock file alone.
func TestRetireLeavesAnotherProducersRepublication(t *testing.T) {
	for _, how := range []string{"cleanup", "close"} {
		t.Run(how, func(t *testing.T) {
			p := NewProducer(Options{})
			defer p.Close()
			key := shmtest.Key("republished")
			mustPut(t, p, key, []byte("ours"))
			mustClaim(t, "", key)
			other := shmtest.Start(t, "put", key, "100", "9")
			if l := other.Line(t, wait); l != "put" {
				t.Fatalf("other producer: %s", l)
			}
			switch how {
			case "cleanup":
				if p.Cleanup(key) {
					t.Error("Cleanup reported retiring another producer's segment")
				}
			case "close":
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
			}
			assertPresent(t, DefaultDir+"/"+scope.LockName(key))
			if got := mustClaim(t, "", key); !bytes.Equal(got, payload(100, 9)) {
				t.Fatalf("claimed %q, want the other producer's payload", got)
			}
			other.Send(t, "close")
			if err := other.Wait(t, wait); err != nil {
				t.Fatal(err)
			}
			assertGone(t, DefaultDir, key)
		})
	}
}

// A producer's files are closed: no descriptor outlives Put, Claim,
// Cleanup, Close or a sweep.
func TestNoDescriptorLeak(t *testing.T) {
	dir := t.TempDir()
	count := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(entries)
	}
	round := func() {
		p := NewProducer(Options{Dir: dir})
		for i := range 10 {
			key := "leak_" + strconv.Itoa(i)
			mustPut(t, p, key, []byte("x"))
			if i%2 == 0 {
				mustClaim(t, dir, key)
			}
		}
		Claim(dir, "leak_absent")
		p.Cleanup("leak_1")
		p.Close()
		SweepOrphans(dir, time.Nanosecond)
	}
	round() // let the runtime open what it keeps
	before := count()
	for range 20 {
		round()
	}
	if after := count(); after != before {
		t.Fatalf("%d descriptors open before, %d after", before, after)
	}
}

// A producer replaces only its own user's file: run as root, unlink would
// remove another user's file that happens to have the key's name.
func TestPutKeepsAnotherUsersFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a file of another uid")
	}
	dir := t.TempDir()
	key := "foreign"
	if err := os.WriteFile(dir+"/"+key, []byte("theirs"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir+"/"+key, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	p := NewProducer(Options{Dir: dir})
	defer p.Close()
	if _, err := p.Put(key, []byte("ours")); err == nil || !strings.Contains(err.Error(), "uid 12345") {
		t.Fatalf("put over another uid's file: %v", err)
	}
	if got, err := os.ReadFile(dir + "/" + key); err != nil || string(got) != "theirs" {
		t.Fatalf("their file: %q, %v", got, err)
	}
	if p.Pending(key) {
		t.Fatal("failed put left the key pending")
	}
}

// A FIFO swapped in at a segment's name between Claim's stat and its open
// is an error, not an open that blocks until some writer appears.
func TestReadSegmentFIFO(t *testing.T) {
	path := t.TempDir() + "/fifo"
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := readSegment(path); err == nil || data != nil {
		t.Fatalf("readSegment(FIFO) = %q, %v", data, err)
	}
}

// The orphan sweep never removes a symlink, or what it points at, nor
// another user's lock file, however old.
func TestSweepOrphansLeavesLinksAndStrangers(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * OrphanGrace)
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, scope.LockName("link"))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	keep := []string{link, target}
	if os.Geteuid() == 0 {
		foreign := filepath.Join(dir, scope.LockName("foreign"))
		if err := os.WriteFile(foreign, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(foreign, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, foreign)
	}
	for _, p := range keep {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := SweepOrphans(dir, 0)
	if err != nil || len(removed) != 0 {
		t.Fatalf("sweep removed %v (%v)", removed, err)
	}
	for _, p := range keep {
		assertPresent(t, p)
	}
}
