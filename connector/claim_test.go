package connector_test

import (
	"errors"
	"testing"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/conntest"
	"omnishm/internal/shmtest"
)

// Claimed follows a publication on both paths: false while it waits, true
// once a receiver took it or the producer retired it.
func TestClaimed(t *testing.T) {
	for _, c := range []struct {
		name      string
		ringBytes int
		shm       bool
	}{{"ring", 0, false}, {"per-key", connector.NoRing, true}} {
		t.Run(c.name, func(t *testing.T) {
			sender, receiver := conntest.Edge(t, c.ringBytes)
			claimed := func(d connector.Descriptor) bool {
				t.Helper()
				ok, err := sender.Claimed(d)
				if err != nil {
					t.Fatalf("Claimed(%v): %v", d, err)
				}
				return ok
			}
			key := shmtest.Key("claimed")
			d := conntest.MustPut(t, sender, "0", "1", key, conntest.Codes(8, 1))
			if (d.Shm != nil) != c.shm {
				t.Fatalf("descriptor %v", d)
			}
			if claimed(d) {
				t.Fatal("claimed before any receiver")
			}
			conntest.MustGet(t, receiver, "0", "1", key, &d)
			if !claimed(d) {
				t.Fatal("not claimed after the receiver took it")
			}

			retired := shmtest.Key("retired")
			d = conntest.MustPut(t, sender, "0", "1", retired, conntest.Codes(8, 2))
			sender.Cleanup(retired)
			if !claimed(d) {
				t.Fatal("a retired publication still waits")
			}
		})
	}
	sender, _ := conntest.Edge(t, 0)
	if _, err := sender.Claimed(connector.Descriptor{}); !errors.Is(err, descriptor.ErrBad) {
		t.Errorf("Claimed(empty descriptor) = %v", err)
	}
}
