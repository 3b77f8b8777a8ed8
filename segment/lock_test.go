//go:build linux

package segment

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// The lock protocol across processes (SPEC §6): a receiver never waits on
// a held lock, a producer waits and reopens a lock file removed meanwhile.

func TestHeldLockIsAMissThenClaims(t *testing.T) {
	p := newProducer(t)
	key := shmtest.Key("held")
	mustPut(t, p, key, []byte("payload"))
	holder := shmtest.HoldLock(t, DefaultDir+"/"+scope.LockName(key))
	if data, ok, err := Claim("", key); ok || err != nil || data != nil {
		t.Fatalf("claim under another process's lock: %q ok=%v err=%v", data, ok, err)
	}
	shmtest.AssertPresent(t, DefaultDir+"/"+key)
	holder.Release(t)
	if got := mustClaim(t, "", key); string(got) != "payload" {
		t.Fatalf("claimed %q", got)
	}
	keyGone(t, DefaultDir, key)
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
	shmtest.WriteFile(t, lockPath, nil)
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
	keyGone(t, DefaultDir, key)
}
