package ring

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"omnishm/descriptor"
	"omnishm/scope"
)

// Transport is the host ring of one process (SPEC §3, §7): its own rings,
// one per edge it puts on (producer_linux.go), and the rings of other
// producers it reads (reader_linux.go), found by discovery
// (discovery_linux.go). It is safe for concurrent use.
type Transport struct {
	names     scope.Names
	dir       string // names.RingDir()
	uid       int
	capacity  uint64
	onFailure func(from, to string, err error) // nil: say nothing
	onReject  func(name string, err error)     // nil: say nothing
	onUnwatch func(err error)                  // nil: say nothing
	onCreate  func(string)
	onRemove  func(string)
	onRetire  func(descriptor.RingHandle, Retirement) // nil: say nothing
	stats     counters

	mu          sync.RWMutex
	closed      atomic.Bool // set under mu; read without it on the poll path
	producers   map[edgeKey]*producer
	disabled    map[edgeKey]bool
	readers     map[string]*reader
	rejected    map[string]fileID // rings found corrupt, as they were then
	order       []*reader         // readers in attach order
	edges       map[edgeKey]*edgeState
	watch       *watcher
	watchFailed bool  // no watcher, for good: the stamp is the only signal
	watchErr    error // why the ring directory is not watched, if it is not
	usedDir     bool  // this process made or used the ring directory as a producer
	changes     chan struct{}

	// Lock-free copies for the poll path, published under mu.
	edgeList  atomic.Pointer[[]*edgeState]
	watchView atomic.Pointer[watcher]
	owned     atomic.Pointer[[]*producer] // for Put: t.producers' values

	sweepBuf atomic.Pointer[[]delivery] // Sweep's, between Sweeps
}

type edgeKey struct{ from, to string }

// New returns a Transport. Nothing is created until the first Put of an
// edge; receivers attach on their first Get.
func New(opts Options) (*Transport, error) {
	if err := CheckCapacity(opts.Capacity); err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	if opts.Capacity != 0 && !strings.HasPrefix(opts.Names.RingDirName, scope.RingDirPrefix) {
		return nil, fmt.Errorf("ring: Options.Names has no ring directory (use scope.New)")
	}
	t := &Transport{
		names:     opts.Names,
		dir:       opts.Names.RingDir(),
		uid:       os.Getuid(),
		capacity:  align16(uint64(opts.Capacity)),
		onFailure: opts.OnSetupFailure,
		onReject:  opts.OnCorrupt,
		onUnwatch: opts.OnWatchFailure,
		onCreate:  opts.OnCreate,
		onRemove:  opts.OnRemove,
		onRetire:  opts.OnRetire,
		producers: map[edgeKey]*producer{},
		disabled:  map[edgeKey]bool{},
		readers:   map[string]*reader{},
		rejected:  map[string]fileID{},
		edges:     map[edgeKey]*edgeState{},
		changes:   make(chan struct{}, 1),
	}
	if t.onCreate == nil {
		t.onCreate = func(string) {}
	}
	if t.onRemove == nil {
		t.onRemove = func(string) {}
	}
	return t, nil
}

// Capacity is the ring capacity in bytes, 0 when the ring is disabled.
func (t *Transport) Capacity() int { return int(t.capacity) }

// MaxPayload is the largest payload the ring may take for key:
// capacity/4 - 16 - len(key) (SPEC §9), 0 when disabled. Put may still
// refuse up to 15 bytes less, as the frame is 16-aligned.
func (t *Transport) MaxPayload(key string) int {
	return max(0, int(t.capacity/4)-frameHeaderSize-len(key))
}

// WatchErr says why discovery compares the ring directory's stamp on every
// miss instead of watching the directory (SPEC §7): nil while it is
// watched, or before any Get needed it. The ring works either way; a
// connector may report it.
func (t *Transport) WatchErr() error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.watchErr
}

// Refresh makes discovery see, now, every registry change made before this
// call. A miss normally reads only atomics that a background reader moves
// when producers appear, so a Get issued right after another process's
// first put of an edge can miss once; a receiver woken by that put calls
// Refresh first (one non-blocking read) so its next Get finds it.
func (t *Transport) Refresh() {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if !t.closed.Load() && t.watch != nil {
		t.watch.sync()
	}
}

// Reap reclaims this process's rings and releases attached rings whose
// producer exited or closed them. The error is a reclaim that found one of
// this process's rings corrupt.
func (t *Transport) Reap() error {
	var errs []error
	for _, p := range t.producerList() {
		p.mu.Lock()
		errs = append(errs, t.lockAndReclaim(p, func() {}))
		p.mu.Unlock()
	}
	t.mu.Lock()
	if !t.closed.Load() {
		t.reapReadersLocked()
	}
	t.mu.Unlock()
	return errors.Join(errs...)
}

// Close retires this process's ready frames, unmaps and unlinks its rings
// and markers, removes the ring directory if empty, and releases attached
// rings (SPEC §9). Readers never unlink a producer's ring. It returns what
// it met on the way (errors.Join); a ring or marker someone else removed
// first is not an error. Idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return nil
	}
	t.closed.Store(true)
	t.edgeList.Store(nil)
	producers, readers, w, usedDir := t.producers, t.order, t.watch, t.usedDir
	t.producers, t.readers, t.order, t.edges = nil, nil, nil, nil
	t.mu.Unlock()
	var errs []error
	for _, p := range producers {
		p.mu.Lock()
		errs = append(errs, p.retireAll(&t.stats))
		p.closed = true
		errs = append(errs, t.release(p))
		p.mu.Unlock()
	}
	for _, r := range readers {
		r.close()
	}
	if usedDir {
		// Fails while other producers own rings: the directory is theirs too.
		if err := unix.Rmdir(t.dir); err != nil && err != unix.ENOTEMPTY && err != unix.EEXIST && err != unix.ENOENT {
			errs = append(errs, fmt.Errorf("ring: remove %s: %w", t.dir, err))
		}
	}
	if w != nil {
		errs = append(errs, w.close())
	}
	return errors.Join(errs...)
}
