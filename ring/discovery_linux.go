package ring

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"omnishm/descriptor"
	"omnishm/scope"
)

// This file is discovery (SPEC §7): finding the producers of an edge
// through the registry (the ring directory's markers and stamp), attaching
// them, and pruning what dead producers left; and Get, whose empty poll
// must stay free of system calls.

// edgeState is a receiver's discovery state for one edge (SPEC §7).
type edgeState struct {
	from, to string
	prefix   string
	// Under Transport.mu:
	readers  []*reader // attached rings of the edge; replaced, never mutated
	complete bool      // every marker seen at stamp/gen was attached
	stamp    dirStamp
	gen      uint64
	localGen uint64
	// view is the lock-free copy the poll path reads.
	view atomic.Pointer[edgeView]
}

// edgeView is an immutable snapshot of an edge for the poll path.
type edgeView struct {
	readers  []*reader
	complete bool
	gen      uint64
	localGen uint64
}

// Get claims key on edge from->to. With desc nil it looks in the edge's
// attached rings, then discovers new producers; with desc it reads only
// that publication (attaching desc.Name if needed). decode runs under the
// ring lock on ring memory that it must copy and not retain, and must not
// call the Transport; its result is returned. A miss is (nil, 0, false,
// nil). Get never waits for another process's lock (SPEC §9).
//
// New frames in attached rings, and new rings of this process's other
// Transports, are seen at once. A new producer in another process is seen
// once the background reader (inotify on the ring directory, through the
// runtime poller) has read its registry event, typically microseconds
// later; where inotify is unavailable every miss compares the directory
// stamp instead (SPEC §7). The first Get of an edge always scans the
// directory.
func (t *Transport) Get(from, to, key string, desc *descriptor.RingHandle, decode func(kind Kind, payload []byte) (any, error)) (v any, size int, ok bool, err error) {
	got, ok, err := t.Receive(from, to, key, desc, decode)
	return got.Value, got.Size, ok, err
}

// Receive is Get that also says which process published the payload
// (Taken.Producer).
func (t *Transport) Receive(from, to, key string, desc *descriptor.RingHandle, decode func(kind Kind, payload []byte) (any, error)) (Taken, bool, error) {
	if desc != nil {
		return t.getDescribed(key, desc, decode)
	}
	return t.ReceiveVouched(from, to, key, decode, nil)
}

// ReceiveVouched is Receive without a descriptor that skips the liveness
// check of the producers v vouches for (see Vouch); a nil v vouches for
// none.
func (t *Transport) ReceiveVouched(from, to, key string, decode func(kind Kind, payload []byte) (any, error), v *Vouch) (Taken, bool, error) {
	readers, current, ok := t.snapshot(from, to)
	if !ok {
		return Taken{}, false, nil
	}
	got, ok, sawDead, err := t.receiveFirst(readers, key, decode, v)
	if ok || err != nil {
		return got, ok, err
	}
	// The cheap miss (SPEC §3, §7): every attached ring missed without a
	// lock and the watch saw no registry change since the edge was last
	// discovered completely. No system call.
	if !sawDead && current {
		return Taken{}, false, nil
	}
	fresh, err := t.discover(edgeKey{from, to}, readers)
	if err != nil {
		return Taken{}, false, err
	}
	got, ok, _, err = t.receiveFirst(fresh, key, decode, v)
	return got, ok, err
}

// receiveFirst claims key from the first of readers that holds it, dropping
// the readers whose producer proves dead on the way; sawDead says whether
// one did. A reader that can tell the key is absent misses without a lock
// (reader.receive).
func (t *Transport) receiveFirst(readers []*reader, key string, decode func(Kind, []byte) (any, error), v *Vouch) (got Taken, ok, sawDead bool, err error) {
	for _, r := range readers {
		got, ok, dead, err := r.receive(&t.stats, key, nil, decode, v)
		if dead && err != nil {
			t.rejectReader(r, err)
			continue
		}
		if ok || err != nil {
			return got, ok, sawDead, err
		}
		sawDead = sawDead || dead
	}
	return Taken{}, false, sawDead, nil
}

// snapshot is the poll path's view of edge from->to, from atomics only: its
// attached rings, and whether discovery is current (the edge was discovered
// completely and the watch saw no registry change since; registry updates
// made by this process are seen at once through localRegistryGen, others'
// as soon as the background reader has read their event). ok is false when
// the ring cannot serve the edge at all.
func (t *Transport) snapshot(from, to string) (readers []*reader, current, ok bool) {
	if t.capacity == 0 || !scope.IsNumeric(from) || !scope.IsNumeric(to) || t.closed.Load() {
		return nil, false, false
	}
	var view *edgeView
	if list := t.edgeList.Load(); list != nil {
		for _, es := range *list {
			if es.from == from && es.to == to {
				view = es.view.Load()
				break
			}
		}
	}
	if view == nil {
		return nil, false, true
	}
	w := t.watchView.Load()
	current = view.complete && w != nil && w.unchanged(view.gen) && localRegistryGen.Load() == view.localGen
	return view.readers, current, true
}

// addReaderLocked registers an attached ring with every edge whose prefix
// it has. t.mu is held.
func (t *Transport) addReaderLocked(r *reader) {
	t.readers[r.name] = r
	t.order = append(t.order, r)
	t.rebuildEdgesLocked()
}

func (t *Transport) rebuildEdgesLocked() {
	for _, es := range t.edges {
		var rs []*reader
		for _, r := range t.order {
			if strings.HasPrefix(r.name, es.prefix) {
				rs = append(rs, r)
			}
		}
		es.readers = rs
	}
	t.publishLocked()
}

// publishLocked refreshes the poll path's copies of the edges. t.mu is held.
func (t *Transport) publishLocked() {
	list := make([]*edgeState, 0, len(t.edges))
	for _, es := range t.edges {
		es.view.Store(&edgeView{readers: es.readers, complete: es.complete, gen: es.gen, localGen: es.localGen})
		list = append(list, es)
	}
	t.edgeList.Store(&list)
	t.watchView.Store(t.watch)
}

// dropReaderLocked closes an attached ring and forgets it. Like the Python
// receiver, every edge must then rediscover (its cached stamp is dropped).
func (t *Transport) dropReaderLocked(r *reader) {
	r.close()
	if t.readers[r.name] == r {
		delete(t.readers, r.name)
	}
	for i, o := range t.order {
		if o == r {
			t.order = append(t.order[:i:i], t.order[i+1:]...)
			break
		}
	}
	for _, es := range t.edges {
		es.complete = false
	}
	t.rebuildEdgesLocked()
}

// reapReadersLocked drops rings whose producer exited or whose file was
// unlinked (the producer closed it).
func (t *Transport) reapReadersLocked() {
	for _, r := range append([]*reader(nil), t.order...) {
		var st unix.Stat_t
		if r.gone() || !r.alive(&t.stats) || unix.Stat(scope.Path(r.name), &st) != nil {
			t.dropReaderLocked(r)
		}
	}
}

// setWatchErrLocked notes why the ring directory is not watched (nil: it
// is), and tells onUnwatch when discovery starts to go without the watch;
// not for a directory that vanished before its watch was added (ENOENT),
// which the next discovery watches again. t.mu is held.
func (t *Transport) setWatchErrLocked(err error) {
	failing := func(err error) bool { return err != nil && !errors.Is(err, unix.ENOENT) }
	if failing(err) && !failing(t.watchErr) && t.onUnwatch != nil {
		t.onUnwatch(err)
	}
	t.watchErr = err
}

// watcherLocked starts the watcher on first need; nil if it cannot run,
// or its background reader stopped: the stat stamp is then the only
// discovery signal, for good. t.mu is held.
func (t *Transport) watcherLocked() *watcher {
	if t.watch != nil {
		if err := t.watch.fs.Err(); err != nil {
			t.setWatchErrLocked(err)
			t.watch.close()
			t.watch, t.watchFailed = nil, true
			t.publishLocked()
		}
	}
	if t.watch == nil && !t.watchFailed {
		w, err := newWatcher()
		if err != nil {
			t.setWatchErrLocked(err)
			t.watchFailed = true
			return nil
		}
		t.watch = w
		go t.forwardRegistry(w)
	}
	return t.watch
}

// discover is the slow part of a Get (SPEC §7): on a changed registry it
// attaches every not-yet-attached marker of the edge, prunes markers whose
// ring or producer is gone, and caches the stamp only if every attach
// succeeded. It returns the edge's rings that are not in tried: those it
// attached, and those attached since the caller's snapshot (by a descriptor
// or another goroutine).
func (t *Transport) discover(ek edgeKey, tried []*reader) ([]*reader, error) {
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return nil, nil
	}
	es := t.edges[ek]
	if es == nil {
		es = &edgeState{from: ek.from, to: ek.to, prefix: t.names.EdgePrefix(ek.from, ek.to)}
		t.edges[ek] = es
		t.rebuildEdgesLocked()
	}
	w := t.watcherLocked()
	for _, r := range es.readers { // replaced, not mutated, by dropReaderLocked
		// Without a pidfd nothing flags a dead producer off the poll path:
		// check it here, as the Python receiver does on every get.
		if r.gone() || r.h == nil && !r.alive(&t.stats) {
			t.dropReaderLocked(r)
		}
	}
	var gen uint64
	if w != nil {
		gen = w.epoch() // before the stat: a later event moves it again
	}
	localGen := localRegistryGen.Load()
	dir := t.dir
	var st unix.Stat_t
	t.stats.dirStats.Add(1)
	if err := unix.Stat(dir, &st); err != nil {
		// No registry (yet, or any more): forget what was attached. While
		// nothing was, a miss costs this one stat and nothing else.
		changed := len(t.order) > 0
		for _, e := range t.edges {
			changed = changed || e.complete
			e.complete = false
		}
		if changed {
			t.reapReadersLocked()
			t.publishLocked()
		}
		t.mu.Unlock()
		if err == unix.ENOENT {
			return nil, nil
		}
		return nil, fmt.Errorf("ring: stat %s: %w", dir, err)
	}
	if w != nil && w.current() == nil {
		if err := w.watchDir(dir); err != nil {
			t.setWatchErrLocked(err)
		} else {
			t.setWatchErrLocked(nil)
			gen = w.epoch()
			if err := unix.Stat(dir, &st); err != nil { // markers made before the watch
				t.mu.Unlock()
				return nil, nil
			}
		}
	}
	stamp := stampOf(&st)
	if es.complete && es.stamp == stamp && !untried(es.readers, tried) {
		if es.gen != gen || es.localGen != localGen {
			es.gen, es.localGen = gen, localGen
			t.publishLocked()
		}
		t.mu.Unlock()
		return nil, nil
	}
	t.reapReadersLocked()
	names, err := t.listMarkers(dir, es.prefix)
	if err != nil {
		// As the Python receiver's glob: a registry that cannot be listed
		// has no producers to offer, and must not hide the per-key path.
		// The edge stays incomplete, so the next Get lists again.
		es.complete = false
		t.publishLocked()
		t.mu.Unlock()
		return nil, nil
	}
	t.forgetRejectedLocked(es.prefix, names)
	complete := true
	var fresh []*reader
	for _, name := range names {
		if t.readers[name] != nil || t.stillRejectedLocked(name) {
			continue
		}
		r, err := t.attach(name)
		switch {
		case errors.Is(err, errRejected):
			// Reported once; skipped until its file or marker changes.
		case err == nil:
			t.addReaderLocked(r)
			fresh = append(fresh, r)
		case errors.Is(err, errGone), errors.Is(err, errDead):
			// Ring names are unique: a marker whose ring or producer is gone
			// never becomes valid again.
			t.prune(dir, name, errors.Is(err, errDead))
		default:
			// Contention with a producer's lock, a ring not yet valid, or a
			// producer whose liveness /proc cannot tell: retry at the next
			// Get, even at this stamp.
			complete = false
		}
	}
	es.complete, es.stamp, es.gen, es.localGen = complete, stamp, gen, localGen
	t.publishLocked()
	for _, r := range es.readers {
		if !slices.Contains(tried, r) && !slices.Contains(fresh, r) {
			fresh = append(fresh, r)
		}
	}
	t.mu.Unlock()
	return fresh, nil
}

func untried(readers, tried []*reader) bool {
	for _, r := range readers {
		if !slices.Contains(tried, r) {
			return true
		}
	}
	return false
}

// listMarkers returns the marker names in dir that start with prefix and
// are valid ring names.
func (t *Transport) listMarkers(dir, prefix string) ([]string, error) {
	t.stats.dirScans.Add(1)
	f, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("ring: list %s: %w", dir, err)
	}
	defer f.Close()
	all, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("ring: list %s: %w", dir, err)
	}
	var names []string
	for _, n := range all {
		if strings.HasPrefix(n, prefix) && scope.ValidRingName(t.uid, n) {
			names = append(names, n)
		}
	}
	return names, nil
}

// prune removes a stale marker under a registry update and, when its
// producer is proven dead, the ring file it left (no one can own it now).
// Best effort: what fails here stays for the next receiver, the watchdog or
// `omnishm prune`, and never hides the per-key path.
func (t *Transport) prune(dir, name string, dead bool) {
	if dead {
		unix.Unlink(scope.Path(name))
	}
	updateRegistry(dir, &t.stats, func(dirfd int) error { return unix.Unlinkat(dirfd, name, 0) })
}
