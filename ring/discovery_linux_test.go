package ring

import (
	"fmt"
	"omnishm/internal/shmtest"
	"testing"
)

// Tests of discovery across processes: new producers through the watch
// and through Refresh.

// producerAfterDiscovery returns a receiver that has discovered edge 0->1
// completely (its stamp cached), and a producer child that put "from-child"
// afterwards: a ring, marker and frame the receiver has not seen.
func producerAfterDiscovery(t *testing.T) (*Transport, *shmtest.Proc) {
	t.Helper()
	sc, p, r := pair(t, 4096)
	mustPut(t, p, "0", "1", "first", []byte{1})
	mustGet(t, r, "0", "1", "first", nil)
	mustMiss(t, r, "0", "1", "from-child", nil)
	child := shmtest.Start(t, "producer", sc, "from-child", "hi")
	child.Line(t, shmtest.Patience) // its put is done
	return r, child
}

// closeProducer has a producer child close its Transport and exit.
func closeProducer(t *testing.T, child *shmtest.Proc) {
	t.Helper()
	child.Send(t, "close")
	child.Exited(t, shmtest.Patience)
}

func TestNewProducerInAnotherProcess(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprintf("watcher=%v", watched), func(t *testing.T) {
			defer setWatcher(watched)()
			r, child := producerAfterDiscovery(t)
			if watched {
				// The watcher reads the child's registry event asynchronously.
				shmtest.Eventually(t, shmtest.Patience, "the child's ring", func() bool {
					_, ok, err := getBytes(r, "0", "1", "from-child", nil)
					if err != nil {
						t.Fatal(err)
					}
					return ok
				})
			} else if got := mustGet(t, r, "0", "1", "from-child", nil); string(got) != "hi" {
				t.Fatalf("got %q", got)
			}
			closeProducer(t, child)
		})
	}
}

// Refresh makes a registry change made before it visible to the next Get,
// even while the background reader has not run (here it never does).
func TestRefreshSeesANewProducerBeforeTheWatcher(t *testing.T) {
	defer setWatcherPassive(true)()
	r, child := producerAfterDiscovery(t)
	mustMiss(t, r, "0", "1", "from-child", nil) // nothing applied the event yet
	r.Refresh()
	if got := mustGet(t, r, "0", "1", "from-child", nil); string(got) != "hi" {
		t.Fatalf("got %q", got)
	}
	closeProducer(t, child)
}
