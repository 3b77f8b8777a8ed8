package ring

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"omnishm/fswatch"
)

// watcher keeps discovery off the poll path (SPEC §3 "a miss must be
// cheap", §7): an inotify watch on the ring directory, applied by
// fswatch's background reader through the runtime poller, whose epoch moves
// on every registry change. Get compares it without a system call. A
// producer's exit reaches the poll path the same way, through its reader's
// pidfd (proc.Handle). Both are forwarded to Transport.Changes, which a
// dispatcher selects on.
type watcher struct {
	fs   *fswatch.Watcher
	dir  atomic.Pointer[fswatch.Watch] // nil until the directory exists
	stop chan struct{}                 // closed by close: ends the Changes forwarder
}

// registryEvents are the changes of the ring directory that discovery must
// see: markers made, removed or renamed, and stamps (SPEC §7).
const registryEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_ATTRIB |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ONLYDIR

// Test switches: the stat fallback (watcherEnabled false), and a watcher
// whose background reader never runs, so only Refresh applies events
// (watcherPassive).
var (
	watcherEnabled = true
	watcherPassive = false
)

var errWatcherOff = errors.New("ring: watcher disabled")

func newWatcher() (*watcher, error) {
	if !watcherEnabled {
		return nil, errWatcherOff
	}
	fs, err := fswatch.New(!watcherPassive)
	if err != nil {
		return nil, err
	}
	return &watcher{fs: fs, stop: make(chan struct{})}, nil
}

// current is the directory's watch while it follows the directory.
func (w *watcher) current() *fswatch.Watch {
	if x := w.dir.Load(); x != nil && !x.Lost() {
		return x
	}
	return nil
}

// epoch is what discovery caches with a complete edge; 0 (never an epoch)
// while nothing is watched.
func (w *watcher) epoch() uint64 {
	if x := w.current(); x != nil {
		return x.Epoch()
	}
	return 0
}

// unchanged reports, with two atomic loads, that no registry event arrived
// since discovery noted gen. A lost watch moved its epoch when it was lost.
func (w *watcher) unchanged(gen uint64) bool {
	x := w.dir.Load()
	return x != nil && x.Epoch() == gen
}

// watchDir (re)watches the ring directory once it exists. Markers made
// before the watch are found because the epoch moved: the caller
// rediscovers. Called under Transport.mu.
func (w *watcher) watchDir(path string) error {
	if old := w.dir.Swap(nil); old != nil {
		old.Remove()
	}
	x, err := w.fs.Add(path, registryEvents)
	if err != nil {
		return err
	}
	w.dir.Store(x)
	return nil
}

// sync applies, now, the directory events the background reader has not
// read yet (see Transport.Refresh).
func (w *watcher) sync() {
	for w.fs.Sync() {
	}
}

func (w *watcher) close() error {
	close(w.stop)
	return w.fs.Close()
}
