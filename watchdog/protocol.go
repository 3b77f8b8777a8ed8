//go:build linux

package watchdog

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	"omnishm/scope"
)

// The pipe protocol, one command a line (parent -> watchdog):
//
//	+<dev>:<ino>:<path>   track path, as long as it is that file
//	s<path>               path is a per-key segment this process is about
//	                      to create (SPEC §6): clean up its key too
//	d<path>               path is a directory this process uses: remove it
//	                      if empty
//	-<path>               forget path
//	.                     forget everything (the owner closed normally)
//
// End of file means the owner is gone: remove what is still tracked.
// Lines a watchdog does not know are ignored, so an owner may send new
// commands to an older watchdog; the first three are the original protocol.

// fileID identifies a file: a path re-created since Track has another one.
type fileID struct{ dev, ino uint64 }

type command struct {
	op   byte // '+', 's', 'd', '-' or '.'
	id   fileID
	path string
}

var errCommand = errors.New("watchdog: malformed command")

// maxPath bounds a tracked path (PATH_MAX).
const maxPath = 4096

// checkPath accepts only clean absolute paths of files under /dev/shm, the
// only place the watchdog ever unlinks, that fit on one protocol line.
func checkPath(path string) error {
	switch {
	case len(path) > maxPath:
		return ErrPath
	case !strings.HasPrefix(path, scope.ShmDir+"/") || len(path) == len(scope.ShmDir)+1:
		return ErrPath
	case filepath.Clean(path) != path:
		return ErrPath
	case strings.ContainsAny(path, "\n\x00"):
		return ErrPath
	}
	return nil
}

func appendTrack(b []byte, id fileID, path string) []byte {
	b = append(b, '+')
	b = strconv.AppendUint(b, id.dev, 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, id.ino, 10)
	b = append(b, ':')
	b = append(b, path...)
	return append(b, '\n')
}

// appendPath is every command that carries only a path: s, d and -.
func appendPath(b []byte, op byte, path string) []byte {
	b = append(b, op)
	b = append(b, path...)
	return append(b, '\n')
}

// parseCommand decodes one line, without its newline.
func parseCommand(line string) (command, error) {
	if line == "." {
		return command{op: '.'}, nil
	}
	if line == "" {
		return command{}, errCommand
	}
	c := command{op: line[0]}
	rest := line[1:]
	switch c.op {
	case '-', 's', 'd':
		c.path = rest
	case '+':
		dev, rest, ok1 := strings.Cut(rest, ":")
		ino, path, ok2 := strings.Cut(rest, ":")
		var err1, err2 error
		c.id.dev, err1 = strconv.ParseUint(dev, 10, 64)
		c.id.ino, err2 = strconv.ParseUint(ino, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil {
			return command{}, errCommand
		}
		c.path = path
	default:
		return command{}, errCommand
	}
	if checkPath(c.path) != nil {
		return command{}, errCommand
	}
	return c, nil
}

// entry is what the watchdog knows of one path.
type entry struct {
	id      fileID
	known   bool // a + line named the file: unlink it if it is still that one
	segment bool // an s line: the path is a per-key segment
	dir     bool // a d line: rmdir it if empty
}

// registry is the watchdog's state: what to remove when the owner dies.
type registry map[string]entry

func (r registry) apply(c command) {
	e := r[c.path]
	switch c.op {
	case '+':
		e.id, e.known = c.id, true
	case 's':
		e.segment = true
	case 'd':
		e.dir = true
	case '-':
		delete(r, c.path)
		return
	case '.':
		clear(r)
		return
	}
	r[c.path] = e
}

// prune drops entries whose file is gone or replaced (a receiver consumed
// the segment), so a long-lived owner that never forgets stays bounded.
// Entries that name no file yet, and directories, wait for their forget.
func (r registry) prune(identify func(path string) (fileID, bool)) {
	for path, e := range r {
		if !e.known || e.dir {
			continue
		}
		if now, ok := identify(path); !ok || now != e.id {
			delete(r, path)
		}
	}
}
