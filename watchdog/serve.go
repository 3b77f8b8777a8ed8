package watchdog

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"golang.org/x/sys/unix"

	"omnishm/internal/reexec"
)

// role is the watchdog's name among the roles a binary can be re-executed
// in (package reexec).
const role = "omnishm-watchdog"

// init turns this process into a watchdog when it was started as one; it
// never returns then. See the package documentation.
func init() {
	reexec.Register(role, func(context.Context, []string) int { return serve(os.Stdin, os.Stdout) })
}

// pruneMin is the registry size at which serve starts pruning consumed files.
const pruneMin = 1024

// serve is the watchdog: it applies commands from in until end of file and
// then unlinks what is still tracked.
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
	r := bufio.NewReader(in)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // a partial last line was cut by the owner's death
		}
		c, err := parseCommand(strings.TrimSuffix(line, "\n"))
		if err != nil {
			continue
		}
		reg.apply(c)
		if len(reg) >= pruneAt {
			reg.prune(identify)
			pruneAt = max(pruneMin, 2*len(reg))
		}
	}
	for path, id := range reg {
		if now, ok := identify(path); ok && now == id {
			if err := unix.Unlink(path); err != nil && err != unix.ENOENT {
				fmt.Fprintf(os.Stderr, "omnishm watchdog: unlink %s: %v\n", path, err)
			}
		}
	}
	return 0
}

// identify returns the identity of the file at path, not following links.
func identify(path string) (fileID, bool) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true
}
