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
//	-<path>               forget path
//	.                     forget everything (the owner closed normally)
//
// End of file means the owner is gone: unlink what is still tracked.

// fileID identifies a file: a path re-created since Track has another one.
type fileID struct{ dev, ino uint64 }

type command struct {
	op   byte // '+', '-' or '.'
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

func appendForget(b []byte, path string) []byte {
	b = append(b, '-')
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
	case '-':
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

// registry is the watchdog's state: the files to unlink when the owner dies.
type registry map[string]fileID

func (r registry) apply(c command) {
	switch c.op {
	case '+':
		r[c.path] = c.id
	case '-':
		delete(r, c.path)
	case '.':
		clear(r)
	}
}

// prune drops entries whose file is gone or replaced (a receiver consumed
// the segment), so a long-lived owner that never forgets stays bounded.
func (r registry) prune(identify func(path string) (fileID, bool)) {
	for path, id := range r {
		if now, ok := identify(path); !ok || now != id {
			delete(r, path)
		}
	}
}
