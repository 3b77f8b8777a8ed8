//go:build linux

package ring

import "golang.org/x/sys/unix"

// Test hooks: replace a system call or the clock for one test.
func setFallocate(f func(fd int, mode uint32, off, n int64) error) (restore func()) {
	old := fallocate
	fallocate = f
	return func() { fallocate = old }
}

func setStampWriter(f func(fd int, ns int64) error) (restore func()) {
	old := setStamp
	setStamp = f
	return func() { setStamp = old }
}

func setClock(f func() int64) (restore func()) {
	old := nowNanos
	nowNanos = f
	return func() { nowNanos = old }
}

func setRewind(on bool) (restore func()) {
	old := rewindEmpty
	rewindEmpty = on
	return func() { rewindEmpty = old }
}

func setWatcher(on bool) (restore func()) {
	old := watcherEnabled
	watcherEnabled = on
	return func() { watcherEnabled = old }
}

// setWatcherPassive makes new watchers apply events only in Refresh, as a
// background reader would that has not run yet.
func setWatcherPassive(on bool) (restore func()) {
	old := watcherPassive
	watcherPassive = on
	return func() { watcherPassive = old }
}

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
