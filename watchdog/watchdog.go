//go:build linux

// Package watchdog removes a process's shared-memory files when the process
// dies, even by SIGKILL: the Go counterpart of the Python side's resource
// tracker (SPEC §6, §9). Unlike that tracker it never removes what another
// process published or uses at the same name since:
//   - a file named with Track (a ring, a segment, a FIFO) is unlinked only
//     if it is still the file that was tracked (device and inode);
//   - a per-key publication named with TrackSegment before its files exist
//     is judged under its key's lock (segment.RemoveAbandoned): its lock
//     file goes when no segment is beside it, and a segment goes only if it
//     is the tracked file or still empty, as no publication is;
//   - a directory named with TrackDir is removed only if empty, a ring
//     directory after its stale markers (ring.Prune).
//
// The watchdog is a small child process, started on the first Track (or
// TrackSegment, TrackDir), that
// runs this same executable in the role "omnishm-watchdog" (package
// internal/reexec): the package's init function recognises it, runs the
// watchdog and exits before main (or TestMain) starts. Any Go binary that
// imports this package, test binaries included, can therefore serve as its
// own watchdog (init functions of packages initialised before this one run
// in it too; a c-shared build loaded by another program cannot, and Track
// then returns ErrUnavailable after a failed handshake). The watchdog reads
// commands from a pipe; when the pipe reaches end of file (the owner exited
// or was killed) it removes what is still tracked and exits. It runs in
// its own session and ignores SIGINT, SIGTERM and SIGHUP, so a Ctrl-C or a
// kill of the owner's process group does not stop it before it has cleaned
// up.
//
// It builds on Linux only (build tag linux), as it needs the parent-death signal, flock and /dev/shm.
package watchdog

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/internal/reexec"
)

// readyLine is the watchdog's handshake: a binary that does not print it is
// not a Go binary with this package (a c-shared library in Python, say).
const readyLine = "omnishm-watchdog ready\n"

// startTimeout bounds the handshake.
const startTimeout = 10 * time.Second

var (
	// ErrPath is returned by Track for a path the watchdog would not unlink:
	// not a clean absolute path under /dev/shm, or too long.
	ErrPath = errors.New("watchdog: path is not a file under /dev/shm")
	// ErrUnavailable is returned by Track when the watchdog process could
	// not be started or has died; files are then not cleaned up for a
	// crashed producer, and the caller carries on without it.
	ErrUnavailable = errors.New("watchdog: unavailable")
	// ErrClosed is returned by Track after Close.
	ErrClosed = errors.New("watchdog: closed")
)

// Watchdog tracks files to unlink if this process dies. Safe for concurrent
// use.
type Watchdog struct {
	exe string // the executable to run as the watchdog; empty: this one

	mu      sync.Mutex
	started bool
	err     error // why the watchdog is unavailable, once it is
	closed  bool
	child   *reexec.Child // the watchdog process, once its handshake is done
	line    []byte
}

// New returns a Watchdog; its process starts on the first Track.
func New() *Watchdog { return &Watchdog{} }

var std = New()

// Default returns the process-wide Watchdog. Closing it disables tracking
// for the rest of the process.
func Default() *Watchdog { return std }

// Track asks the watchdog to unlink path if this process dies before
// Forget(path) or Close. path must be a file under /dev/shm; its identity
// (device and inode) is recorded now, so a file re-created at path later by
// someone else is not unlinked. Track writes to the watchdog before it
// returns. It returns ErrUnavailable when the watchdog cannot run.
func (w *Watchdog) Track(path string) error {
	if err := checkPath(path); err != nil {
		return fmt.Errorf("%w: %q", err, path)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fmt.Errorf("watchdog: track %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%w: %s is a directory", ErrPath, path)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.startLocked(); err != nil {
		return err
	}
	w.line = appendTrack(w.line[:0], fileID{dev: uint64(st.Dev), ino: st.Ino}, path)
	return w.sendLocked()
}

// TrackSegment asks the watchdog to clean up the per-key publication
// (SPEC §6) whose segment is at path if this process dies before
// Forget(path) or Close. Call it before creating the key's lock file or
// segment, and Track(path) as soon as the segment exists: the watchdog then
// knows the names before the files exist and the segment's identity before
// its bytes. At the owner's death it unlinks the segment if it is still the
// file Track named, then lets segment.RemoveAbandoned judge the rest under
// the key's lock: the lock file, when no segment is beside it, and a
// segment the owner died creating, which is still empty (no publication
// is). So a producer killed at any point of a put leaves neither file, and
// a file another process made at either name since is left alone.
func (w *Watchdog) TrackSegment(path string) error { return w.trackName('s', path) }

// TrackDir asks the watchdog to remove the directory at path, if it is
// empty, once this process dies (it need not exist yet): the wake and ring
// directories a connector uses. A ring directory first loses the markers of
// rings that are gone, with the registry stamp update (ring.Prune).
// Forget(path) is never needed: an empty directory is no one's.
func (w *Watchdog) TrackDir(path string) error { return w.trackName('d', path) }

func (w *Watchdog) trackName(op byte, path string) error {
	if err := checkPath(path); err != nil {
		return fmt.Errorf("%w: %q", err, path)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.startLocked(); err != nil {
		return err
	}
	w.line = appendPath(w.line[:0], op, path)
	return w.sendLocked()
}

// Forget stops tracking path, whichever way it was tracked; the caller has
// removed it or hands it over.
func (w *Watchdog) Forget(path string) {
	if checkPath(path) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started || w.err != nil || w.closed {
		return
	}
	w.line = appendPath(w.line[:0], '-', path)
	w.sendLocked()
}

// Close forgets every tracked file (the owner has already cleaned up what
// it meant to) and stops the watchdog. Close is idempotent; Track returns
// ErrClosed afterwards.
func (w *Watchdog) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if !w.started || w.child == nil {
		return nil
	}
	if w.err == nil {
		w.line = append(w.line[:0], ".\n"...)
		w.sendLocked()
	}
	// End of file makes it exit (it ignores the SIGINT that comes with
	// it); it forgot everything, so one still running after startTimeout
	// is killed rather than left behind.
	w.child.Stop(startTimeout)
	return nil
}

func (w *Watchdog) sendLocked() error {
	if _, err := w.child.Write(w.line); err != nil {
		w.failLocked(err)
		return w.err
	}
	return nil
}

// failLocked makes the watchdog unavailable for good; Track returns the
// error from then on and the connector says so once (this package never
// logs).
func (w *Watchdog) failLocked(cause error) {
	w.err = fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// startLocked starts the watchdog process unless it runs already.
func (w *Watchdog) startLocked() error {
	switch {
	case w.closed:
		return ErrClosed
	case w.started:
		return w.err
	}
	w.started = true
	if err := w.spawnLocked(); err != nil {
		w.failLocked(err)
	}
	return w.err
}

func (w *Watchdog) spawnLocked() error {
	c, err := reexec.Start(role, reexec.Options{
		Exe:   w.exe,
		Argv0: role,
		Dir:   "/",
		// Its own session and no death signal: it must outlive this
		// process to clean up after it.
		Detach:       true,
		Ready:        strings.TrimSuffix(readyLine, "\n"),
		ReadyTimeout: startTimeout,
	})
	if err != nil {
		return err
	}
	w.child = c
	return nil
}
