//go:build linux

package watchdog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"omnishm/internal/reexec"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/segment"
	"omnishm/wake"
)

// role is the watchdog's name among the roles a binary can be re-executed
// in (package reexec).
const role = "omnishm-watchdog"

// init turns this process into a watchdog when it was started as one; it
// never returns then. See the package documentation.
func init() {
	reexec.Register(role, func(context.Context, []string) int { return serve(newLazyPipe(os.Stdin), os.Stdout) })
}

// drainEvery is how often the watchdog reads its owner's commands while
// the owner lives. Nothing needs them sooner: they matter at the owner's
// death, which ends the wait at once, and the pipe holds them meanwhile.
// Read as they came, each would wake this process: two or three context
// switches per per-key publication, on a machine whose cores the pipeline
// needs.
const drainEvery = 20 // ms

// pipeBytes is the pipe size the watchdog asks for (the unprivileged
// maximum by default): room for drainEvery's commands at any rate a
// producer reaches, so its writes do not block on a full pipe.
const pipeBytes = 1 << 20

// lazyPipe reads the command pipe at most every drainEvery, or at once
// when the owner is gone.
type lazyPipe struct {
	f       *os.File
	fds     []unix.PollFd
	drained bool // the last read emptied the pipe: wait before the next
}

// newLazyPipe reads f lazily if it can be given pipeBytes of room, else as
// commands come: in a smaller pipe a burst of them would block the owner
// until the next drain.
func newLazyPipe(f *os.File) io.Reader {
	if n, err := unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, pipeBytes); err != nil || n < pipeBytes {
		return f
	}
	return &lazyPipe{f: f, fds: []unix.PollFd{{Fd: int32(f.Fd())}}, drained: true}
}

func (l *lazyPipe) Read(p []byte) (int, error) {
	if l.drained {
		// No events asked for: poll returns on the hang-up of the owner's
		// end (its death or Close), or at the timeout; then the reads
		// take what the pipe holds, or wait for the next command.
		for {
			if _, err := unix.Poll(l.fds, drainEvery); err != unix.EINTR {
				break
			}
		}
	}
	n, err := l.f.Read(p)
	l.drained = n < len(p)
	return n, err
}

// pruneMin is the registry size at which serve starts pruning consumed files.
const pruneMin = 1024

// serve is the watchdog: it applies commands from in until end of file and
// then removes what is still tracked.
func serve(in io.Reader, hello io.Writer) int {
	// The owner's Ctrl-C or group kill must not stop the cleanup; end of
	// file on the pipe is the only way out (besides SIGKILL).
	signal.Ignore(unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	if _, err := io.WriteString(hello, readyLine); err != nil {
		return 1
	}
	if f, ok := hello.(*os.File); ok {
		f.Close()
	}
	reg := registry{}
	pruneAt := pruneMin
	r := reexec.NewLineReader(in)
	for {
		line, err := r.ReadLine()
		if err != nil {
			break // a partial last line was cut by the owner's death
		}
		c, err := parseCommand(line)
		if err != nil {
			continue
		}
		reg.apply(c)
		if len(reg) >= pruneAt {
			reg.prune(identify)
			pruneAt = max(pruneMin, 2*len(reg))
		}
	}
	cleanup(reg)
	return 0
}

// cleanup removes what the dead owner left, in an order that keeps each
// step safe: the files it named by identity (rings, segments, FIFOs, and
// with a FIFO its sleepers file); then
// what is left of its per-key publications, judged under each key's lock
// (segment.RemoveAbandoned: lock files, and a segment it died creating);
// the markers of its rings; then the directories it used, if empty.
func cleanup(reg registry) {
	var dirs []string
	uid := os.Getuid()
	for path, e := range reg {
		if e.known {
			if now, ok := identify(path); ok && now == e.id {
				if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
					warn("unlink %s: %v", path, err)
				}
			}
			if rn, ok := scope.ParseRingName(uid, filepath.Base(path)); ok && filepath.Dir(path) == scope.ShmDir {
				removeMarker(scope.Path(rn.Dir), filepath.Base(path))
			}
			removeSleepers(uid, path)
		}
		if e.dir {
			dirs = append(dirs, path)
		}
	}
	for path, e := range reg {
		if e.segment {
			if _, err := segment.RemoveAbandoned(filepath.Dir(path), filepath.Base(path)); err != nil {
				warn("%v", err)
			}
		}
	}
	// Children before their parents.
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, dir := range dirs {
		switch err := unix.Rmdir(dir); err {
		case nil, unix.ENOENT, unix.ENOTEMPTY, unix.EEXIST:
		default:
			warn("rmdir %s: %v", dir, err)
		}
	}
}

// removeMarker retires the marker of one of the owner's rings, once its ring
// file is gone, with the registry stamp update receivers cache discovery on
// (SPEC §7). Only the owner's own markers are touched.
func removeMarker(dir, name string) {
	if _, ok := identify(scope.Path(name)); ok {
		return // the ring is still there (not the tracked file): keep its marker
	}
	err := ring.UpdateRegistry(dir, func(dirfd int) error {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && err != unix.ENOENT {
			return err
		}
		return nil
	})
	if err != nil && !errors.Is(err, unix.ENOENT) {
		warn("retire marker %s/%s: %v", dir, name, err)
	}
}

// removeSleepers removes the sleepers file (package wake) of a FIFO the
// owner's receiver made, once the FIFO is gone: the FIFO's unique name says
// the file is the dead owner's.
func removeSleepers(uid int, path string) {
	dir, name := filepath.Dir(path), filepath.Base(path)
	if _, ok := scope.RingDirOfWakeDir(uid, filepath.Base(dir)); !ok || filepath.Dir(dir) != scope.ShmDir {
		return
	}
	if _, ok := scope.FIFOStage(name); !ok {
		return
	}
	if _, ok := identify(path); ok {
		return // not the tracked FIFO: whose file it is, is unknown
	}
	if err := wake.RemoveSleepers(dir, name); err != nil && !errors.Is(err, wake.ErrNotSleepers) {
		warn("%v", err)
	}
}

// warn reports a failure on the watchdog's stderr (its owner is gone).
func warn(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "omnishm watchdog: "+format+"\n", a...)
}

// identify returns the identity of the file at path, not following links.
func identify(path string) (fileID, bool) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true
}
