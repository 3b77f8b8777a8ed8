//go:build linux

package ring

import "golang.org/x/sys/unix"

// Test hooks: replace a system call, the clock or a switch for one test.
func setFallocate(f func(fd int, mode uint32, off, n int64) error) (restore func()) {
	return swap(&fallocate, f)
}

func setStampWriter(f func(fd int, ns int64) error) (restore func()) { return swap(&setStamp, f) }

func setClock(f func() int64) (restore func()) { return swap(&nowNanos, f) }

func setRewind(on bool) (restore func()) { return swap(&rewindEmpty, on) }

func setWatcher(on bool) (restore func()) { return swap(&watcherEnabled, on) }

// setWatcherPassive makes new watchers apply events only in Refresh, as a
// background reader would that has not run yet.
func setWatcherPassive(on bool) (restore func()) { return swap(&watcherPassive, on) }

// swap sets *p to v and returns what puts the old value back.
func swap[T any](p *T, v T) (restore func()) {
	old := *p
	*p = v
	return func() { *p = old }
}

// The package's tests count flock calls (work).
func init() { countFlocks = true }

// work is what the poll path must not do: flock calls, directory scans,
// directory stats and liveness checks.
type work struct{ flocks, scans, stats, liveness int64 }

func (t *Transport) work() work {
	return work{t.stats.flocks.Load(), t.stats.dirScans.Load(), t.stats.dirStats.Load(), t.stats.livenessChecks.Load()}
}

func (t *Transport) readerFDs() map[string]int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	fds := map[string]int{}
	for name, r := range t.readers {
		fds[name] = r.m.fd
	}
	return fds
}

func (t *Transport) edgeStamp(from, to string) (int64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	es := t.edges[edgeKey{from, to}]
	if es == nil {
		return 0, false
	}
	return es.stamp.mtime, es.complete
}

var errNoSpace = unix.ENOSPC

// attaches counts the ring files this Transport opened to attach.
func (t *Transport) attaches() int64 { return t.stats.attaches.Load() }
