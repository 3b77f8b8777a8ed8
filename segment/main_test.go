//go:build linux

package segment

import (
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/descriptor"
	"omnishm/internal/shmtest"
)

// wait bounds every exchange with a child process.
const wait = 20 * time.Second

func TestMain(m *testing.M) {
	shmtest.Main(m, map[string]func([]string) int{
		"put":       rolePut,
		"claim":     roleClaim,
		"transfers": roleTransfers,
		"putfail":   rolePutFail,
	})
}

// rolePut publishes one payload (args: key size seed) from a child process,
// then closes its producer when the parent says so.
func rolePut(args []string) int {
	size, _ := strconv.Atoi(args[1])
	seed, _ := strconv.ParseUint(args[2], 10, 64)
	p := NewProducer(Options{})
	if _, err := p.Put(args[0], shmtest.Payload(size, seed)); err != nil {
		return shmtest.ChildFailed(err)
	}
	shmtest.Say("put")
	shmtest.Hear()
	if err := p.Close(); err != nil {
		return shmtest.ChildFailed(err)
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
		return shmtest.ChildFailed(err)
	}
	p := NewProducer(Options{})
	defer p.Close()
	_, err := p.Put(args[0], shmtest.Payload(size, 1))
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
			shmtest.Say("got %s", shmtest.Digest(data))
		}
	}
}

// newProducer is a producer with the default options, closed when the
// test ends.
func newProducer(tb testing.TB) *Producer {
	p := NewProducer(Options{})
	tb.Cleanup(func() { p.Close() })
	return p
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

// keyFiles makes a directory for key's files, removed when the test ends,
// and returns it with key's segment and lock file in it (SPEC §6).
func keyFiles(tb testing.TB, key string) (dir, seg, lock string) {
	dir = tb.TempDir()
	kf := shmtest.KeyFiles(dir, key)
	return dir, kf[0], kf[1]
}

// keyGone fails unless key's segment and lock file in dir are both absent.
func keyGone(t *testing.T, dir, key string) {
	t.Helper()
	shmtest.AssertAbsent(t, shmtest.KeyFiles(dir, key)...)
}
