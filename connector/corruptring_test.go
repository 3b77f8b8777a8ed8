//go:build linux

package connector_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
)

// A corrupt ring next to a live edge, its creator alive (this process): the
// legitimate producer's payloads keep arriving on both paths, ring and per
// key, by Get and by Recv, and the connector warns once.
func TestCorruptRingNextToALiveEdge(t *testing.T) {
	const ringBytes = 1 << 16
	cases := []struct {
		name string
		off  int64
		b    []byte
	}{
		{"bad magic", 0, []byte("NOTARING")},
		{"frame size not a multiple of 16", ring.HeaderSize, []byte{40, 0, 0, 0}},
		{"key past its frame", ring.HeaderSize + 10, []byte{0xff, 0xff}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := shmtest.Scope(t)
			names := scope.New(s)
			hostile, err := ring.New(ring.Options{Names: names, Capacity: ringBytes})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { hostile.Close() })
			if _, ok, err := hostile.Put("0", "1", "planted", ring.KindBytes, 4, func(dst []byte) error { return nil }); !ok || err != nil {
				t.Fatalf("plant: ok=%v err=%v", ok, err)
			}
			planted, _ := filepath.Glob(scope.Path(names.EdgePrefix("0", "1")) + "*")
			if len(planted) != 1 {
				t.Fatalf("rings %v, want the planted one", planted)
			}
			f, err := os.OpenFile(planted[0], os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(c.b, c.off); err != nil {
				t.Fatal(err)
			}
			f.Close()
			sender := conntest.Open(t, s, "0", ringBytes)
			receiver, warns := openWarned(t, s, "1", ringBytes)
			for i := range 10 {
				for _, n := range []int{4, ringBytes} { // the ring, then per key
					key := shmtest.Key("k" + strconv.Itoa(i) + "_" + strconv.Itoa(n))
					conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(n, int64(i)))
					if got := conntest.CodesOf(t, conntest.MustGet(t, receiver, "0", "1", key, nil)); got[0] != int64(i) || len(got) != n {
						t.Fatalf("get %s: %d values from %d", key, len(got), got[0])
					}
					key += "r"
					conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(n, int64(i)))
					ctx, cancel := context.WithTimeout(context.Background(), wait)
					v, _, err := receiver.Recv(ctx, "0", key)
					cancel()
					if err != nil {
						t.Fatalf("recv %s: %v", key, err)
					}
					if got := conntest.CodesOf(t, v); got[0] != int64(i) || len(got) != n {
						t.Fatalf("recv %s: %d values from %d", key, len(got), got[0])
					}
				}
				conntest.Missing(t, receiver, "0", "1", "planted", nil)
			}
			if n := warns.n.Load(); n != 1 {
				t.Fatalf("%d warnings, want one", n)
			}
		})
	}
}
