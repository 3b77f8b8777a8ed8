package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/jsonform"
	"omnishm/ring"
	"omnishm/scope"
)

// exitUnclaimed is send's status when no receiver claimed the payload in time.
const exitUnclaimed = 3

// exitInterrupted is the conventional status after SIGINT (128 + 2).
const exitInterrupted = 130

func init() {
	register(command{
		name:    "send",
		usage:   "--scope S --from F --to T --key K [--ring-bytes N] [--wait DURATION] [FILE|-]",
		summary: "publish a payload (JSON form), print its descriptor, stay until it is claimed (exit 0)",
		run:     runSend,
	})
}

// edgeFlags are the flags send and recv share.
type edgeFlags struct {
	scope, from, to, key *string
	ringBytes            *int
}

func declareEdgeFlags(inv *invocation, ringHelp string) (*flag.FlagSet, edgeFlags) {
	fs := inv.flags()
	e := edgeFlags{
		scope:     fs.String("scope", "", "wakeup scope shared by both ends (default: none, names keyed by the parent pid)"),
		from:      fs.String("from", "", "producer stage id (required)"),
		to:        fs.String("to", "", "receiver stage id (required)"),
		key:       fs.String("key", "", "publication key (required)"),
		ringBytes: fs.Int("ring-bytes", ring.DefaultCapacity, ringHelp),
	}
	return fs, e
}

// check reports the first missing required flag.
func (e edgeFlags) check(inv *invocation) (int, bool) {
	for _, f := range []struct{ name, v string }{{"from", *e.from}, {"to", *e.to}, {"key", *e.key}} {
		if f.v == "" {
			return inv.usageError("--%s is required", f.name), false
		}
	}
	if ring.CheckCapacity(*e.ringBytes) != nil {
		return inv.usageError("--ring-bytes %d: want 0 (per-key only) or 4096..67108864", *e.ringBytes), false
	}
	return exitOK, true
}

// open opens a connector for stage, configured from the flags.
func (e edgeFlags) open(stage string) (*connector.SHM, error) {
	return connector.Open(connector.Options{
		StageID:       connector.Stage(stage),
		WakeupScope:   *e.scope,
		HostRingBytes: connector.RingBytes(*e.ringBytes), // --ring-bytes 0: per-key only
	})
}

func runSend(ctx context.Context, args []string, inv *invocation) int {
	fs, e := declareEdgeFlags(inv, "host ring capacity; 0 forces the per-key path")
	wait := fs.Duration("wait", 30*time.Second, "if no receiver claims the payload within this time, retire it and exit 3\n(SIGINT or SIGTERM retire it and exit 130)")
	if code, ok := inv.parse(fs, args); !ok {
		return code
	}
	if code, ok := e.check(inv); !ok {
		return code
	}
	if *wait <= 0 {
		return inv.usageError("--wait %v: want a positive duration", *wait)
	}
	if fs.NArg() > 1 {
		return inv.usageError("want at most one payload file, got %d arguments", fs.NArg())
	}
	text, err := inv.readInput(fs.Args())
	if err != nil {
		return inv.fail(err)
	}
	payload, err := jsonform.Unmarshal(text)
	if err != nil {
		return inv.fail(fmt.Errorf("payload: %w", err))
	}
	// Retire on SIGINT/SIGTERM whoever runs us (main does this too).
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The sender receives nothing: no stage id, so no wakeup FIFO of its own.
	conn, err := e.open("")
	if err != nil {
		return inv.fail(err)
	}
	defer conn.Close()
	_, desc, err := conn.Put(*e.from, *e.to, *e.key, payload)
	if err != nil {
		return inv.fail(err)
	}
	fmt.Fprintln(inv.out, desc.String())

	claimed, err := newClaimCheck(desc)
	if err != nil {
		conn.Cleanup(*e.key)
		return inv.fail(err)
	}
	defer claimed.close()
	deadline := time.NewTimer(*wait)
	defer deadline.Stop()
	// Poll cheaply (one pread or one lstat) with a backoff: the frames must
	// outlive the put until claimed, and nothing else here needs the CPU.
	backoff := 200 * time.Microsecond
	for !claimed.done() {
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			conn.Cleanup(*e.key)
			fmt.Fprintf(inv.err, "omnishm send: interrupted; publication of %q retired\n", *e.key)
			return exitInterrupted
		case <-deadline.C:
			t.Stop()
			if claimed.done() {
				return exitOK
			}
			conn.Cleanup(*e.key)
			fmt.Fprintf(inv.err, "omnishm send: no receiver claimed %q within %v; publication retired\n", *e.key, *wait)
			return exitUnclaimed
		case <-t.C:
		}
		backoff = min(backoff*2, 20*time.Millisecond)
	}
	return exitOK
}

// claimCheck tells whether a publication has been claimed, from the files
// alone: a per-key segment is claimed once its file is gone (the receiver
// unlinks it, SPEC §6); a ring frame once its state byte says done or the
// tail has moved past it (SPEC §3). The ring is read without its lock, one
// aligned byte and one aligned word at a time, so that polling never makes
// a receiver's non-blocking lock miss.
type claimCheck struct {
	segment  string // path of the per-key segment, or ""
	ino      uint64
	fd       int // ring file, or -1
	position uint64
	capacity uint64
}

func newClaimCheck(d connector.Descriptor) (*claimCheck, error) {
	c := &claimCheck{fd: -1}
	switch {
	case d.Shm != nil:
		c.segment = filepath.Join(scope.ShmDir, d.Shm.Name)
		var st unix.Stat_t
		if err := unix.Lstat(c.segment, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return c, nil // already claimed
			}
			return nil, fmt.Errorf("watch %s: %w", c.segment, err)
		}
		c.ino = st.Ino
	case d.HostRing != nil:
		if !scope.ValidRingName(os.Getuid(), d.HostRing.Name) {
			return nil, fmt.Errorf("watch ring %q: not a ring name of this user", d.HostRing.Name)
		}
		path := filepath.Join(scope.ShmDir, d.HostRing.Name)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", path, err)
		}
		var hdr [64]byte
		if n, err := unix.Pread(fd, hdr[:], 0); err != nil || n != len(hdr) {
			unix.Close(fd)
			return nil, fmt.Errorf("watch %s: short header", path)
		}
		c.fd, c.position, c.capacity = fd, d.HostRing.Position, binary.LittleEndian.Uint64(hdr[8:])
		if c.capacity == 0 {
			unix.Close(fd)
			return nil, fmt.Errorf("watch %s: zero capacity", path)
		}
	default:
		return nil, descriptor.ErrBad
	}
	return c, nil
}

func (c *claimCheck) done() bool {
	if c.fd < 0 {
		if c.segment == "" {
			return true
		}
		var st unix.Stat_t
		return unix.Lstat(c.segment, &st) != nil || st.Ino != c.ino
	}
	var tail [8]byte
	if n, err := unix.Pread(c.fd, tail[:], 24); err != nil || n != 8 {
		return true // the ring is gone: nothing left to keep alive
	}
	if binary.LittleEndian.Uint64(tail[:]) > c.position {
		return true
	}
	var state [1]byte
	if n, err := unix.Pread(c.fd, state[:], int64(64+c.position%c.capacity+9)); err != nil || n != 1 {
		return true
	}
	return state[0] == 1
}

func (c *claimCheck) close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
	}
}
