package shmstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/scope"
)

// entry is one lstat'ed name in a directory.
type entry struct {
	name string
	st   unix.Stat_t
}

func (e entry) isDir() bool     { return e.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (e entry) isRegular() bool { return e.st.Mode&unix.S_IFMT == unix.S_IFREG }
func (e entry) isFIFO() bool    { return e.st.Mode&unix.S_IFMT == unix.S_IFIFO }
func (e entry) mtime() time.Time {
	return time.Unix(e.st.Mtim.Sec, e.st.Mtim.Nsec)
}

// listOwn lstats every name in dir that belongs to uid. A missing dir is an
// empty list: scopes come and go while we look.
func listOwn(dir string, uid int) ([]entry, error) {
	names, err := readNames(dir)
	if err != nil {
		return nil, err
	}
	var out []entry
	for _, n := range names {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, n), &st) != nil || int(st.Uid) != uid {
			continue
		}
		out = append(out, entry{name: n, st: st})
	}
	return out, nil
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("shmstate: list %s: %w", dir, err)
	}
	slices.Sort(names)
	return names, nil
}

// layout indexes one listing of the shared-memory directory.
type layout struct {
	ringDirs  map[string]entry   // D -> dir entry
	wakeDirs  map[string]entry   // D -> the wake dir whose path D hashes
	ringFiles map[string][]entry // D -> ring files
	files     map[string]entry   // every regular file, by name
	locks     []entry
}

func readLayout(o Options) (layout, error) {
	l := layout{
		ringDirs:  map[string]entry{},
		wakeDirs:  map[string]entry{},
		ringFiles: map[string][]entry{},
		files:     map[string]entry{},
	}
	entries, err := listOwn(o.Dir, o.UID)
	if err != nil {
		return l, err
	}
	for _, e := range entries {
		switch {
		case e.isDir() && isRingDirName(o.UID, e.name):
			l.ringDirs[e.name] = e
		case e.isDir():
			if d, ok := wakeDirRingDir(o.UID, e.name); ok {
				l.wakeDirs[d] = e
			}
		case e.isRegular():
			l.files[e.name] = e
			if rn, ok := parseRingName(o.UID, e.name); ok {
				l.ringFiles[rn.dir] = append(l.ringFiles[rn.dir], e)
			} else if key, ok := lockKey(e.name); ok && strings.HasPrefix(key, o.KeyPrefix) {
				l.locks = append(l.locks, e)
			}
		}
	}
	return l, nil
}

// scopeDirs returns the ring directory names to show, and the scope string
// and wake dir name of each one that was asked for by name.
func (l layout) scopeDirs(o Options) (dirs []string, names map[string]string, wake map[string]string) {
	names, wake = map[string]string{}, map[string]string{}
	if o.Scopes != nil {
		for _, s := range o.Scopes {
			n := scope.ForUID(o.UID, s, os.Getppid())
			dirs = append(dirs, n.RingDirName)
			names[n.RingDirName] = s
			wake[n.RingDirName] = filepath.Base(n.WakeDir)
		}
		return dirs, names, wake
	}
	seen := map[string]bool{}
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for d := range l.ringDirs {
		add(d)
	}
	for d, e := range l.wakeDirs {
		add(d)
		wake[d] = e.name
	}
	for d := range l.ringFiles {
		add(d)
	}
	slices.Sort(dirs)
	return dirs, names, wake
}

// Scan reads the current state without modifying anything and without
// waiting on any lock.
func Scan(o Options) (*State, error) {
	o = o.withDefaults()
	l, err := readLayout(o)
	if err != nil {
		return nil, err
	}
	st := &State{Dir: o.Dir, UID: o.UID, Scopes: []Scope{}, Segments: []Segment{}, Locks: []Lock{}}
	dirs, names, wake := l.scopeDirs(o)
	for _, d := range dirs {
		sc, err := scanScope(o, l, d, names[d], wake[d])
		if err != nil {
			return nil, err
		}
		st.Scopes = append(st.Scopes, sc)
	}
	for _, e := range l.locks {
		key, _ := lockKey(e.name)
		seg, hasSeg := l.files[key]
		if _, isRing := parseRingName(o.UID, key); isRing {
			hasSeg = false
		}
		age := o.Now.Sub(e.mtime())
		st.Locks = append(st.Locks, Lock{Key: key, Name: e.name, Segment: hasSeg, Orphan: !hasSeg && age > OrphanGrace, Age: Age(age)})
		if hasSeg {
			st.Segments = append(st.Segments, Segment{Key: key, Size: seg.st.Size, Age: Age(o.Now.Sub(seg.mtime()))})
		}
	}
	return st, nil
}

func scanScope(o Options, l layout, d, name, wakeName string) (Scope, error) {
	sc := Scope{Name: name, RingDir: d, Rings: []Ring{}, MarkersWithoutRing: []string{}, FIFOs: []FIFO{}}
	_, sc.RingDirExists = l.ringDirs[d]
	markers := map[string]bool{}
	if sc.RingDirExists {
		entries, err := listOwn(filepath.Join(o.Dir, d), o.UID)
		if err != nil {
			return sc, err
		}
		for _, e := range entries {
			if e.isRegular() {
				markers[e.name] = true
			}
		}
	}
	rings := map[string]bool{}
	for _, e := range l.ringFiles[d] {
		rings[e.name] = true
		r := inspectRing(filepath.Join(o.Dir, e.name), e, o)
		r.Marker = markers[e.name]
		sc.Rings = append(sc.Rings, r)
	}
	for m := range markers {
		if !rings[m] {
			sc.MarkersWithoutRing = append(sc.MarkersWithoutRing, m)
		}
	}
	slices.Sort(sc.MarkersWithoutRing)
	if wakeName != "" {
		sc.WakeDir = filepath.Join(o.Dir, wakeName)
		entries, err := listOwn(sc.WakeDir, o.UID)
		if err != nil {
			return sc, err
		}
		var wst unix.Stat_t
		sc.WakeDirExists = unix.Lstat(sc.WakeDir, &wst) == nil && wst.Mode&unix.S_IFMT == unix.S_IFDIR
		for _, e := range entries {
			stage, ok := fifoStage(e.name)
			if !ok || !e.isFIFO() {
				continue
			}
			sc.FIFOs = append(sc.FIFOs, FIFO{Name: e.name, Stage: stage, Reader: hasReader(filepath.Join(sc.WakeDir, e.name)), Age: Age(o.Now.Sub(e.mtime()))})
		}
	}
	return sc, nil
}

// inspectRing reads one ring file: its header without the lock (capacity
// and creator never change after creation), its frames under a
// non-blocking lock (SPEC §3: every access to frames is under the lock).
func inspectRing(path string, e entry, o Options) Ring {
	rn, _ := parseRingName(o.UID, e.name)
	r := Ring{Name: e.name, From: rn.from, To: rn.to, PID: rn.pid, FileSize: e.st.Size, ReadyKeys: []string{}, Age: Age(o.Now.Sub(e.mtime()))}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		r.Error, r.Producer = err.Error(), nameLiveness(rn.pid)
		return r
	}
	defer unix.Close(fd)
	var hdr [ringHeaderSize]byte
	n, _ := unix.Pread(fd, hdr[:], 0)
	if n < ringHeaderSize || string(hdr[:8]) != ringMagic {
		// Not initialised yet, or not a ring: the name's pid is all we have.
		r.Error, r.Producer = "header not written", nameLiveness(rn.pid)
		return r
	}
	h, _ := parseRingHeader(hdr[:])
	r.Capacity, r.CreatorPID, r.CreatorStart = h.capacity, h.creatorPID, h.creatorStart
	r.Producer = liveness(h.creatorPID, h.creatorStart)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		r.Busy = true
		return r
	}
	defer unix.Flock(fd, unix.LOCK_UN)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size < ringHeaderSize {
		r.Error = "file shrank"
		return r
	}
	r.FileSize = st.Size
	b, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		r.Error = fmt.Sprintf("map: %v", err)
		return r
	}
	defer unix.Munmap(b)
	h, err = parseRingHeader(b)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Used = h.head - h.tail
	c, err := countFrames(b, h)
	r.Ready, r.Done, r.ReadyKeys = c.ready, c.done, append(r.ReadyKeys, c.readyKeys...)
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// liveness compares the header's creator with /proc (SPEC §3, §7).
func liveness(pid, start uint64) Producer {
	if pid == 0 || pid > 1<<31 {
		return Dead
	}
	got, err := startTime(int(pid))
	if err != nil || got != start {
		return Dead
	}
	return Alive
}

// nameLiveness is all that can be said from the pid in a ring's name: a
// running process might still be initialising the header.
func nameLiveness(pid int) Producer {
	if _, err := startTime(pid); err != nil {
		return Dead
	}
	return Unknown
}

// startTime is field 22 (starttime) of /proc/{pid}/stat.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStartTime(b)
}

// hasReader reports whether a FIFO has a reader: opening it for writing
// without blocking fails with ENXIO exactly when none has it open. Any
// other failure counts as "has a reader" so it is never pruned on doubt.
func hasReader(path string) bool {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return true
	}
	return !errors.Is(err, unix.ENXIO)
}
