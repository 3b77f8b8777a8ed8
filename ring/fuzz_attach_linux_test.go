package ring

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"omnishm/internal/shmtest"
	"omnishm/scope"
)

// FuzzAttach plants arbitrary bytes as a ring file of this uid, with its
// marker, next to a live edge, as a hostile or broken producer could: a
// receiver's discovery and Get must not panic, must not deliver from it
// unless it is a valid ring, and must go on delivering the live producer's
// payloads, by name and by descriptor.
func FuzzAttach(f *testing.F) {
	sc := shmtest.Scope(f)
	names := scope.New(sc)
	legit := newTransport(f, sc, 4096)
	// The ring directory, and no frame left ready: one would block the live
	// ring's reclaim for good.
	mustPut(f, legit, "0", "1", "warm", []byte("up"))
	mustGet(f, newTransport(f, sc, 4096), "0", "1", "warm", nil)
	// Seeds: rings of this process (a live creator) holding frames, so that
	// mutations reach frame validation, and a few plain corruptions.
	seeder := newTransport(f, sc, 4096)
	for i := range 5 {
		mustPut(f, seeder, "0", "1", fmt.Sprint("p", i), make([]byte, i*37))
		b, err := os.ReadFile(scope.Path(ringOf(f, seeder, "0", "1")))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize+4096))
	f.Add([]byte("OMSHMR01"))
	seeder.Close()
	var n atomic.Uint64
	f.Fuzz(func(t *testing.T, b []byte) {
		name := names.RingName("0", "1", os.Getpid()+1, fmt.Sprintf("%032x", n.Add(1)))
		path := scope.Path(name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		if err := updateRegistry(names.RingDir(), nil, func(dirfd int) error {
			fd, err := unix.Openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
			if err != nil {
				return err
			}
			return unix.Close(fd)
		}); err != nil {
			t.Fatal(err)
		}
		defer updateRegistry(names.RingDir(), nil, func(dirfd int) error { return unix.Unlinkat(dirfd, name, 0) })
		_, _, valid := Parse(b)
		receiver, err := New(Options{Names: names, Capacity: 4096})
		if err != nil {
			t.Fatal(err)
		}
		defer receiver.Close()
		for i := range 2 {
			for _, k := range []string{"p0", "p1", "p2", "p3", "p4"} {
				if got, ok, err := getBytes(receiver, "0", "1", k, nil); err != nil || ok && valid != nil {
					t.Fatalf("get %s from a planted ring: %q ok=%v err=%v", k, got, ok, err)
				}
			}
			key := fmt.Sprint("live", i)
			d := mustPut(t, legit, "0", "1", key, []byte(key))
			if got := mustGet(t, receiver, "0", "1", key, nil); string(got) != key {
				t.Fatalf("%s: %q", key, got)
			}
			d = mustPut(t, legit, "0", "1", key, []byte(key+"d"))
			if got := mustGet(t, receiver, "0", "1", key, &d); string(got) != key+"d" {
				t.Fatalf("%s by descriptor: %q", key, got)
			}
		}
	})
}
