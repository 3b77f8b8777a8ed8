//go:build linux

package segment

import (
	"errors"
	"fmt"
	"sync"

	"omnishm/descriptor"
	"omnishm/keys"
	"omnishm/scope"
)

// ErrClosed is returned by Put after Close.
var ErrClosed = errors.New("segment: producer closed")

// errEmpty refuses a zero-size segment: it reads as "not ready yet" to
// every receiver (SPEC §6), so it would never be claimed.
var errEmpty = errors.New("segment: put: empty payload")

// sweepBatch bounds the consumed-key sweep each Put does, as Python's
// _reap_segments does: a round-robin over at most 64 pending keys.
const sweepBatch = 64

// Options configure a Producer. The zero value writes into DefaultDir
// without hooks.
type Options struct {
	// Dir holds segments and lock files; empty means DefaultDir. Both
	// endpoints must use the same directory.
	Dir string
	// The hooks let a crash watchdog know which files this process owns
	// (package watchdog), so that a producer killed at any point of a Put
	// leaves nothing behind. Each is called with a segment's path, without
	// the producer's locks held, possibly from several goroutines at once:
	//   - WillCreate before Put may create the key's lock file or segment,
	//     so the name is known before the file exists;
	//   - OnCreate right after Put created the segment, before it writes
	//     the payload, so the file's identity is known before its bytes;
	//   - OnRemove once the producer holds nothing at the path any more: it
	//     unlinked the segment, learned that a receiver consumed it, or the
	//     Put that announced it failed and left nothing.
	// A Put that replaces its own unclaimed segment calls OnCreate for the
	// new one only: the path is the same.
	WillCreate func(path string)
	OnCreate   func(path string)
	OnRemove   func(path string)
}

// Producer publishes payloads as per-key segments and remembers which of
// them no receiver has claimed yet, with the identity (device and inode) of
// the file it wrote for each, so it can tell its own unclaimed segment from
// one another producer wrote under the same key since (Claimed, Cleanup,
// CleanupPrefix, Close). The zero Producer writes into DefaultDir. It is
// safe for concurrent use.
type Producer struct {
	dir        string
	willCreate func(string)
	onCreate   func(string)
	onRemove   func(string)

	mu      sync.Mutex
	pending pendingSet
	closed  bool
}

// NewProducer returns a producer configured by opts.
func NewProducer(opts Options) *Producer {
	return &Producer{dir: opts.Dir, willCreate: opts.WillCreate, onCreate: opts.OnCreate, onRemove: opts.OnRemove}
}

// path is where the file name lives: in Dir, or DefaultDir for the zero
// Producer.
func (p *Producer) path(name string) string {
	if p.dir == "" {
		return DefaultDir + "/" + name
	}
	return p.dir + "/" + name
}

func (p *Producer) segPath(key string) string  { return p.path(key) }
func (p *Producer) lockPath(key string) string { return p.path(scope.LockName(key)) }

// Put publishes data under key (SPEC §6): under the key's lock file it
// writes a segment of exactly len(data) plain bytes, replacing an unclaimed
// one, and records the key as pending. data is copied before Put returns.
// A receiver in any process then claims it with Claim. A bad key is an
// error wrapping keys.ErrBadKey; after Close, Put fails with ErrClosed.
func (p *Producer) Put(key string, data []byte) (descriptor.ShmHandle, error) {
	return p.PutParts(key, [][]byte{data})
}

// PutParts is Put of the bytes of parts, one after the other, written
// straight from them into the segment (pwritev): a payload held in pieces
// (wire.Pieces) needs no buffer of its own. parts are copied before
// PutParts returns and not kept; PutParts may reslice the elements of
// parts (never their bytes).
func (p *Producer) PutParts(key string, parts [][]byte) (descriptor.ShmHandle, error) {
	if err := keys.Check(key); err != nil {
		return descriptor.ShmHandle{}, err
	}
	size := 0
	for _, b := range parts {
		size += len(b)
	}
	if size == 0 {
		return descriptor.ShmHandle{}, errEmpty
	}
	if p.isClosed() {
		return descriptor.ShmHandle{}, ErrClosed
	}
	p.sweepConsumed()

	lock, seg := p.lockPath(key), p.segPath(key)
	p.notify(p.willCreate, seg)
	fd, _, err := lockFile(lock, true)
	if err != nil {
		p.failed(key, seg)
		return descriptor.ShmHandle{}, putError(err)
	}
	defer closeFD(fd)
	// Forget the key while its segment changes, so that a concurrent sweep
	// does not take the new segment for another producer's.
	old, wasPending := p.forget(key)
	replaced, id, err := writeSegment(seg, size, parts, func() { p.notify(p.onCreate, seg) })
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
		if _, serr := lstatFile(seg); serr == errGone {
			_, rerr := remove(lock)
			err = errors.Join(err, rerr)
		}
		p.failed(key, seg)
		return descriptor.ShmHandle{}, putError(err)
	}

	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.pending.add(key, id)
	}
	p.mu.Unlock()
	if closed {
		// Close ran meanwhile and will not see this key: retire it here.
		_, serr := remove(seg)
		_, lerr := remove(lock)
		p.notify(p.onRemove, seg)
		if err := errors.Join(serr, lerr); err != nil {
			return descriptor.ShmHandle{}, errors.Join(ErrClosed, putError(err))
		}
		return descriptor.ShmHandle{}, ErrClosed
	}
	return descriptor.ShmHandle{Name: key, Size: size}, nil
}

func putError(err error) error { return fmt.Errorf("segment: put: %w", err) }

// failed tells OnRemove that a failed Put left nothing of p's at seg,
// unless an earlier publication of key is still pending there.
func (p *Producer) failed(key, seg string) {
	if !p.Pending(key) {
		p.notify(p.onRemove, seg)
	}
}

// Pending reports whether key was published by p and not yet known to be
// consumed or retired.
func (p *Producer) Pending(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.pending.lookup(key)
	return ok
}

// Claimed reports whether the publication h, returned by p.Put, no longer
// waits for a receiver: its segment is gone (a receiver claimed it, SPEC §6)
// or is another file now (claimed, then published again under the same key
// by someone else). The name and size in h cannot tell "still mine" from
// "claimed and re-published"; the identity of the file p created, which p
// recorded at Put, can. A key p holds nothing under (never put, retired by
// Cleanup or Close, or already known to be consumed) reports true. Once it
// reports true, p forgets the key as Put's consumed-key sweep would
// (OnRemove is called). Claimed takes no lock, so polling it never makes a
// receiver's non-blocking lock miss. A per-key publication has no
// generation: after p puts h.Name again, Claimed speaks of the newer one.
func (p *Producer) Claimed(h descriptor.ShmHandle) (bool, error) {
	if err := keys.Check(h.Name); err != nil {
		return false, err
	}
	p.mu.Lock()
	id, ok := p.pending.lookup(h.Name)
	p.mu.Unlock()
	if !ok {
		return true, nil
	}
	seg := p.segPath(h.Name)
	switch now, err := lstatFile(seg); {
	case err == errGone:
	case err != nil:
		return false, fmt.Errorf("segment: claimed: %w", err)
	case now.id == id:
		return false, nil
	}
	p.mu.Lock()
	cur, still := p.pending.lookup(h.Name)
	if still && cur == id {
		p.pending.remove(h.Name)
	}
	p.mu.Unlock()
	if still && cur == id {
		p.notify(p.onRemove, seg)
	}
	return true, nil
}

// Cleanup retires key if p published it and no receiver has claimed it:
// under the key's lock it unlinks the segment and the lock file. It reports
// whether an unconsumed segment was actually unlinked (SPEC §9). A key p
// holds nothing under is no error; a bad key is one wrapping keys.ErrBadKey.
func (p *Producer) Cleanup(key string) (bool, error) {
	if err := keys.Check(key); err != nil {
		return false, err
	}
	unlinked, err := p.retire(key)
	if err != nil {
		return unlinked, fmt.Errorf("segment: cleanup: %w", err)
	}
	return unlinked, nil
}

// CleanupPrefix retires every pending key that is prefix followed by
// decimal digits only ("req_0_" matches "req_0_12", not "req_0_1x" nor
// "request_0_1") and returns how many unconsumed segments it unlinked. It
// goes on past a key it fails to retire and returns every failure, joined.
func (p *Producer) CleanupPrefix(prefix string) (int, error) {
	p.mu.Lock()
	selected := p.pending.keys(func(k string) bool { return keys.InPrefix(prefix, k) })
	p.mu.Unlock()
	n := 0
	var errs []error
	for _, k := range selected {
		unlinked, err := p.Cleanup(k)
		if unlinked {
			n++
		}
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// Close retires every pending segment and its lock file. Later Puts fail
// with ErrClosed; calling Close again does nothing. It goes on past a key
// it fails to retire and returns every failure, joined.
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
			errs = append(errs, fmt.Errorf("segment: close: %w", err))
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
	lock, seg := p.lockPath(key), p.segPath(key)
	fd, _, err := lockFile(lock, true)
	if err != nil {
		// The segment may still be there: OnRemove stays unsaid, so a
		// crash watchdog still removes it.
		return false, err
	}
	defer closeFD(fd)
	unlinked := false
	switch now, err := lstatFile(seg); {
	case err == errGone:
		// Consumed: only the lock file (lockFile may just have made it).
	case err != nil:
		return false, err
	case now.id != id:
		p.notify(p.onRemove, seg)
		return false, nil
	default:
		if unlinked, err = remove(seg); err != nil {
			return false, err
		}
	}
	p.notify(p.onRemove, seg)
	// Unlink the lock file while holding it, as a receiver does, so a
	// waiting producer notices and reopens.
	_, err = remove(lock)
	return unlinked, err
}

// sweepConsumed forgets pending keys whose segment a receiver has removed
// (gone, or replaced by another producer's since).
// Python holds its pending-keys lock across the sweep; so does this, so a
// concurrent Cleanup never finds a key half-forgotten.
func (p *Producer) sweepConsumed() {
	p.mu.Lock()
	n := min(sweepBatch, p.pending.len())
	gone := p.pending.rotate(n, func(key string, id fileID) bool {
		now, err := lstatFile(p.segPath(key))
		return err != errGone && (err != nil || now.id == id)
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
