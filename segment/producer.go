package segment

import (
	"errors"
	"fmt"
	"log/slog"
	"omnishm/descriptor"
	"omnishm/keys"
	"omnishm/scope"
	"sync"
)

// ErrClosed is returned by Put after Close.
var ErrClosed = errors.New("segment: producer closed")

// sweepBatch bounds the consumed-key sweep each Put does, as Python's
// _reap_segments does: a round-robin over at most 64 pending keys.
const sweepBatch = 64

// Options configure a Producer.
type Options struct {
	// Dir holds segments and lock files; empty means DefaultDir. Both
	// endpoints must use the same directory.
	Dir string
	// OnCreate, when set, is called with a segment's path right after this
	// producer creates it, and OnRemove once the producer has unlinked it or
	// learned that a receiver consumed it: they let a crash watchdog know
	// which files this process owns. Called without the producer's locks
	// held, possibly from several goroutines at once.
	OnCreate func(path string)
	OnRemove func(path string)
}

// Producer publishes payloads as per-key segments and remembers which of
// them no receiver has claimed yet, so it can retire them (Cleanup,
// CleanupPrefix, Close). It is safe for concurrent use.
type Producer struct {
	dir      string
	onCreate func(string)
	onRemove func(string)

	mu      sync.Mutex
	pending pendingSet
	closed  bool
}

// NewProducer returns a producer writing into opts.Dir.
func NewProducer(opts Options) *Producer {
	dir := opts.Dir
	if dir == "" {
		dir = DefaultDir
	}
	return &Producer{dir: dir, onCreate: opts.OnCreate, onRemove: opts.OnRemove, pending: newPendingSet()}
}

func (p *Producer) segPath(key string) string  { return p.dir + "/" + key }
func (p *Producer) lockPath(key string) string { return p.dir + "/" + scope.LockName(key) }

// Put publishes data under key (SPEC §6): under the key's lock file it
// writes a segment of exactly len(data) plain bytes, replacing an unclaimed
// one, and records the key as pending. data is copied before Put returns.
// A receiver in any process then claims it with Claim.
func (p *Producer) Put(key string, data []byte) (descriptor.ShmHandle, error) {
	if err := keys.Check(key); err != nil {
		return descriptor.ShmHandle{}, err
	}
	if len(data) == 0 {
		// A zero-size segment reads as "not ready yet" to every receiver.
		return descriptor.ShmHandle{}, fmt.Errorf("segment: put %q: empty payload", key)
	}
	if p.isClosed() {
		return descriptor.ShmHandle{}, ErrClosed
	}
	p.sweepConsumed()

	fd, err := lockFile(p.lockPath(key), true)
	if err != nil {
		return descriptor.ShmHandle{}, fmt.Errorf("segment: put %q: %w", key, err)
	}
	defer closeFD(fd)
	seg := p.segPath(key)
	// Forget the key while its segment changes, so that a concurrent sweep
	// does not take the new segment for another producer's.
	old, wasPending := p.forget(key)
	replaced, id, err := writeSegment(seg, data)
	if replaced && wasPending {
		p.notify(p.onRemove, seg)
	}
	if err != nil {
		if wasPending && !replaced {
			p.mu.Lock()
			if !p.closed {
				p.pending.add(key, old) // still there, or a sweep drops it
			}
			p.mu.Unlock()
		}
		// Leave no lock file without a segment behind (it would wait 60 s
		// for a sweep); one beside a segment we could not replace stays.
		if _, serr := segmentAt(seg); serr == errGone {
			remove(p.lockPath(key))
		}
		return descriptor.ShmHandle{}, fmt.Errorf("segment: put %q: %w", key, err)
	}
	p.notify(p.onCreate, seg)

	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.pending.add(key, id)
	}
	p.mu.Unlock()
	if closed {
		// Close ran meanwhile and will not see this key: retire it here.
		remove(seg)
		remove(p.lockPath(key))
		p.notify(p.onRemove, seg)
		return descriptor.ShmHandle{}, ErrClosed
	}
	return descriptor.ShmHandle{Name: key, Size: len(data)}, nil
}

// Pending reports whether key was published by p and not yet known to be
// consumed or retired.
func (p *Producer) Pending(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending.has(key)
}

// Cleanup retires key if p published it and no receiver has claimed it:
// under the key's lock it unlinks the segment and the lock file. It reports
// whether an unconsumed segment was actually unlinked (SPEC §9).
func (p *Producer) Cleanup(key string) bool {
	if keys.Check(key) != nil {
		return false
	}
	unlinked, err := p.retire(key)
	if err != nil {
		slog.Warn("segment: cleanup failed", "key", key, "err", err)
	}
	return unlinked
}

// CleanupPrefix retires every pending key that is prefix followed by
// decimal digits only ("req_0_" matches "req_0_12", not "req_0_1x" nor
// "request_0_1") and returns how many unconsumed segments it unlinked.
func (p *Producer) CleanupPrefix(prefix string) int {
	p.mu.Lock()
	selected := p.pending.keys(func(k string) bool { return keys.InPrefix(prefix, k) })
	p.mu.Unlock()
	n := 0
	for _, k := range selected {
		if p.Cleanup(k) {
			n++
		}
	}
	return n
}

// Close retires every pending segment and its lock file. Later Puts fail
// with ErrClosed; calling Close again does nothing.
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	keys := p.pending.keys(nil)
	p.mu.Unlock()
	var errs []error
	for _, k := range keys {
		if _, err := p.retire(k); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *Producer) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// forget drops key from the pending set and returns the identity of the
// segment it was published with, if it was there.
func (p *Producer) forget(key string) (fileID, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending.remove(key)
}

// retire unlinks a pending key's segment and lock file under its lock,
// unless the segment there is no longer the one p wrote: a receiver claimed
// it and another producer published the key again, and that publication,
// with its lock file, is not p's to remove.
func (p *Producer) retire(key string) (bool, error) {
	id, ok := p.forget(key)
	if !ok {
		return false, nil
	}
	seg := p.segPath(key)
	fd, err := lockFile(p.lockPath(key), true)
	if err != nil {
		// The segment may still be there: OnRemove stays unsaid, so a
		// crash watchdog still removes it.
		return false, fmt.Errorf("segment: retire %q: %w", key, err)
	}
	defer closeFD(fd)
	unlinked := false
	switch now, err := segmentAt(seg); {
	case err == errGone:
		// Consumed: only the lock file (lockFile may just have made it).
	case err != nil:
		return false, fmt.Errorf("segment: retire %q: %w", key, err)
	case now != id:
		p.notify(p.onRemove, seg)
		return false, nil
	default:
		if unlinked, err = remove(seg); err != nil {
			return false, fmt.Errorf("segment: retire %q: %w", key, err)
		}
	}
	p.notify(p.onRemove, seg)
	// Unlink the lock file while holding it, as a receiver does, so a
	// waiting producer notices and reopens.
	if _, err := remove(p.lockPath(key)); err != nil {
		return unlinked, fmt.Errorf("segment: retire %q: %w", key, err)
	}
	return unlinked, nil
}

// sweepConsumed forgets pending keys whose segment a receiver has removed
// (gone, or replaced by another producer's since).
// Python holds its pending-keys lock across the sweep; so does this, so a
// concurrent Cleanup never finds a key half-forgotten.
func (p *Producer) sweepConsumed() {
	p.mu.Lock()
	n := min(sweepBatch, p.pending.len())
	gone := p.pending.rotate(n, func(key string, id fileID) bool {
		now, err := segmentAt(p.segPath(key))
		return err != errGone && (err != nil || now == id)
	})
	p.mu.Unlock()
	for _, k := range gone {
		p.notify(p.onRemove, p.segPath(k))
	}
}

func (p *Producer) notify(hook func(string), path string) {
	if hook != nil {
		hook(path)
	}
}
