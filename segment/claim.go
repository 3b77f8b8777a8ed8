//go:build linux

package segment

import (
	"errors"
	"fmt"
	"os"

	"omnishm/descriptor"
	"omnishm/keys"
	"omnishm/scope"
)

// Claim takes the publication under key from dir (empty: DefaultDir), as a
// receiver of SPEC §6 does. ok is false on a miss: no segment, an empty one,
// or its lock held by another process (Claim never waits). A miss costs one
// stat. On success the segment and its lock file are gone, no other receiver
// in any process can get the same publication, and data is a new slice the
// caller owns (the payload, unwrapped from the OMNIIPC1 form if present).
// A segment that was claimed but is corrupt is removed and reported as an
// error wrapping ErrCorrupt. Only this user's regular files are taken: a
// symlink, a FIFO or another user's file at the segment's or the lock
// file's name, or one this process may not open (EACCES), is an error
// wrapping ErrUnsafe, with nothing read or removed.
// A bad key is an error wrapping keys.ErrBadKey.
func Claim(dir, key string) (data []byte, ok bool, err error) {
	return Claimer{Dir: dir}.Claim(key)
}

// Claimer claims publications as Claim does, and tells a crash watchdog
// (package watchdog) about the one moment a receiver's death would leave a
// file behind: between unlinking a segment and unlinking its lock file.
// The zero Claimer claims from DefaultDir without hooks.
type Claimer struct {
	// Dir holds segments and lock files; empty means DefaultDir.
	Dir string
	// WillRemove is called with the segment's path, under the key's lock,
	// just before the segment is unlinked, and OnRemove once Claim is past
	// the unlinks: a watchdog that tracks the key in between
	// (watchdog.TrackSegment) removes the lock file if this process dies
	// there. Neither is called on a miss.
	WillRemove func(path string)
	OnRemove   func(path string)
}

// Claim is the package's Claim from c.Dir, with c's hooks.
func (c Claimer) Claim(key string) (data []byte, ok bool, err error) {
	return c.claim(key, nil)
}

// ClaimInto is Claim reading the segment straight into memory alloc
// returns (receiver-supplied memory): alloc is called once, under the
// key's lock, with the segment's size, and must return a slice of exactly
// that length, which data is (or, for the OMNIIPC1 form, a window of). An
// alloc error is returned (wrapped) before anything is read, with the
// publication left in place for a later claim. Nothing keeps a reference
// to the memory after ClaimInto returns.
func (c Claimer) ClaimInto(key string, alloc func(n int) ([]byte, error)) (data []byte, ok bool, err error) {
	if alloc == nil {
		return nil, false, claimError(errors.New("nil allocator"))
	}
	return c.claim(key, alloc)
}

func (c Claimer) claim(key string, alloc func(int) ([]byte, error)) (data []byte, ok bool, err error) {
	if err := keys.Check(key); err != nil {
		return nil, false, err
	}
	dir := c.Dir
	if dir == "" {
		dir = DefaultDir
	}
	seg := dir + "/" + key
	if _, err := segmentSize(seg); err != nil {
		return nil, false, missOr(err)
	}
	lockPath := dir + "/" + scope.LockName(key)
	fd, lock, err := lockFile(lockPath, false)
	if err != nil {
		return nil, false, missOr(err)
	}
	defer closeFD(fd)
	if lock.uid != os.Geteuid() {
		return nil, false, claimError(pathError("lock", lockPath, foreign(lock.uid)))
	}
	raw, err := readSegment(seg, alloc)
	if err != nil {
		return nil, false, missOr(err)
	}
	// Unlink the segment first: once it is gone no one else can claim it,
	// then the lock file while still holding it (SPEC §6).
	if c.WillRemove != nil || c.OnRemove != nil {
		// The hooks get a path of their own: seg stays off the heap on the
		// miss path.
		path := dir + "/" + key
		if c.WillRemove != nil {
			c.WillRemove(path)
		}
		if c.OnRemove != nil {
			defer c.OnRemove(path)
		}
	}
	if _, err := remove(seg); err != nil {
		return nil, false, claimError(err)
	}
	if _, err := remove(lockPath); err != nil {
		return nil, false, claimError(err)
	}
	payload, err := unwrap(raw)
	if err != nil {
		return nil, false, claimError(pathError("unwrap", seg, err))
	}
	return payload, true, nil
}

// ClaimDescriptor is Claim for a descriptor from the producer. A per-key
// publication has no generation: if the key was re-published since, the
// newer payload is returned, whatever d.Size said.
func ClaimDescriptor(dir string, d descriptor.ShmHandle) ([]byte, bool, error) {
	return Claim(dir, d.Name)
}

// missOr turns the "not now" outcomes into a miss and wraps the rest.
func missOr(err error) error {
	if notNow(err) == nil {
		return nil
	}
	return claimError(err)
}

func claimError(err error) error { return fmt.Errorf("segment: claim: %w", err) }
