//go:build linux

package connector

import (
	"sync"

	"golang.org/x/sys/unix"

	"omnishm/fswatch"
	"omnishm/scope"
)

// shmEvents are the /dev/shm changes that can end a per-key publication's
// wait: a receiver's claim unlinks the segment (SPEC §6), a rename moves a
// name away or over it.
const shmEvents = unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ONLYDIR

// shmWatch wakes the WaitClaimed calls on per-key publications when a name
// leaves /dev/shm: one inotify instance per connector, made on the first
// such wait and read by fswatch's background reader in the runtime poller
// (no thread per waiter), with a watch on the directory only while someone
// waits (it is a busy directory, mostly other producers' traffic). The
// watch names no file, so every waiter re-checks its own segment: one
// lstat. Its zero value is ready; after close it watches nothing.
type shmWatch struct {
	mu     sync.Mutex
	fs     *fswatch.Watcher // nil until first use
	w      *fswatch.Watch   // nil while nobody waits
	users  int
	failed bool          // no watch can be had: waiters poll
	why    error         // why, when failed
	others chan struct{} // closed by the waiter that takes a notification
	closed bool
}

// acquire starts a wait and reports whether /dev/shm is watched for it.
// Every acquire is paired with a release.
func (s *shmWatch) acquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users++
	return s.watchLocked()
}

// release ends a wait; the last one removes the watch.
func (s *shmWatch) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users--; s.users == 0 && s.w != nil {
		s.w.Remove()
		s.w = nil
	}
}

// watchLocked makes sure the directory is watched, re-adding a lost watch
// (after a queue overflow, say); false when it cannot be, for good.
func (s *shmWatch) watchLocked() bool {
	if s.closed || s.failed {
		return false
	}
	if s.fs == nil {
		fs, err := fswatch.New(true)
		if err != nil {
			s.failed, s.why = true, err
			return false
		}
		s.fs = fs
	}
	if !s.fs.Background() {
		// Its reader stopped: nothing would announce an event any more.
		s.failed, s.why = true, s.fs.Err()
		return false
	}
	if s.w != nil && !s.w.Lost() {
		return true
	}
	if s.w != nil {
		s.w.Remove()
	}
	w, err := s.fs.Add(scope.ShmDir, shmEvents)
	if err != nil {
		s.w, s.failed, s.why = nil, true, err
		return false
	}
	s.w = w
	return true
}

// failure is why no watch can be had, once none can (nil before, or after
// Close).
func (s *shmWatch) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	return s.why
}

// channels are what a waiter selects on: the instance's notification
// (coalesced: only one waiter receives it) and the channel that waiter
// closes for the others. Nil channels when nothing is watched.
func (s *shmWatch) channels() (event, others <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fs == nil || s.w == nil {
		return nil, nil
	}
	if s.others == nil {
		s.others = make(chan struct{})
	}
	return s.fs.C(), s.others
}

// fired is called by the waiter that received the notification: it wakes
// the other waiters and re-adds the watch if it was lost. It reports
// whether the directory is still watched.
func (s *shmWatch) fired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.others != nil {
		close(s.others)
		s.others = nil
	}
	return s.watchLocked()
}

// close ends the watch and its instance, waking every waiter.
func (s *shmWatch) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.others != nil {
		close(s.others)
		s.others = nil
	}
	s.w = nil
	if s.fs == nil {
		return nil
	}
	return s.fs.Close()
}
