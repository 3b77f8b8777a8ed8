//go:build linux

// Package conntest is the test harness of code that uses a connector:
// connectors on a test's own scope that close when the test ends, the
// put/get checks every such test repeats, and a payload whose values are
// known. It builds on shmtest (scopes, keys, child processes).
//
// It builds on Linux only (build tag linux), as it needs package connector.
package conntest

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"omnishm/config"
	"omnishm/connector"
	"omnishm/descriptor"
	"omnishm/internal/shmtest"
	"omnishm/ring"
	"omnishm/scope"
	"omnishm/tensor"
)

// Rings are the ring settings a transport test runs under: the default
// ring, a 4 KiB ring that fills up and falls back to per-key segments part
// of the time, and per-key segments only.
var Rings = []struct {
	Name  string
	Bytes int // Options.HostRingBytes
}{{"ring", ring.DefaultCapacity}, {"small-ring", ring.MinCapacity}, {"per-key", connector.NoRing}}

// EachRing runs fn as a subtest under each of Rings, each on a scope of its
// own.
func EachRing(t *testing.T, fn func(t *testing.T, scope string, ringBytes int)) {
	for _, rc := range Rings {
		t.Run(rc.Name, func(t *testing.T) { fn(t, shmtest.Scope(t), rc.Bytes) })
	}
}

// Open opens a connector as stage on scope with HostRingBytes ringBytes
// (connector.NoRing for per-key only), closed when the test ends.
func Open(tb testing.TB, scope string, stage connector.Stage, ringBytes int) *connector.SHM {
	tb.Helper()
	return open(tb, connector.Options{WakeupScope: scope, StageID: stage, HostRingBytes: ringBytes})
}

// OpenWarned is Open with a logger that counts the warnings the connector
// logs (a hostile file, a ring that cannot be set up).
func OpenWarned(tb testing.TB, scope string, stage connector.Stage, ringBytes int) (*connector.SHM, *Warnings) {
	tb.Helper()
	w := &Warnings{}
	return open(tb, connector.Options{WakeupScope: scope, StageID: stage, HostRingBytes: ringBytes, Logger: w.Logger()}), w
}

func open(tb testing.TB, o connector.Options) *connector.SHM {
	tb.Helper()
	c, err := connector.Open(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

// Warnings is a slog.Handler that counts the records of level Warn and
// above logged through it, and keeps their messages; the zero value is
// ready.
type Warnings struct {
	n    atomic.Int32
	mu   sync.Mutex
	msgs []string
}

// Logger returns a logger writing to w.
func (w *Warnings) Logger() *slog.Logger { return slog.New(w) }

// Count is the number of warnings logged so far.
func (w *Warnings) Count() int { return int(w.n.Load()) }

// Containing is the number of warnings so far whose message contains s.
func (w *Warnings) Containing(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// Enabled implements slog.Handler: every level reaches Handle.
func (w *Warnings) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler: it counts r if it is a warning or worse.
func (w *Warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.n.Add(1)
		w.mu.Lock()
		w.msgs = append(w.msgs, r.Message)
		w.mu.Unlock()
	}
	return nil
}

// WithAttrs implements slog.Handler; the count is shared.
func (w *Warnings) WithAttrs([]slog.Attr) slog.Handler { return w }

// WithGroup implements slog.Handler; the count is shared.
func (w *Warnings) WithGroup(string) slog.Handler { return w }

// FromConfig builds the connector named name in the configuration document
// yaml (config.Parse, then connector.New), closed when the test ends. It
// returns the connector's configuration too.
func FromConfig(tb testing.TB, yaml, name string) (connector.Receiver, config.Connector) {
	tb.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		tb.Fatal(err)
	}
	c, err := connector.New(cfg.Connectors[name])
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	})
	return c, cfg.Connectors[name]
}

// Edge opens both ends of edge 0->1 on a scope of the test's own.
func Edge(tb testing.TB, ringBytes int) (sender, receiver *connector.SHM) {
	tb.Helper()
	s := shmtest.Scope(tb)
	return Open(tb, s, "0", ringBytes), Open(tb, s, "1", ringBytes)
}

// HoldRing holds the lock of the ring d's frame is in, as a put in
// progress holds it, from a child process: until Release, or the test's
// end.
func HoldRing(tb testing.TB, d connector.Descriptor) *shmtest.Lock {
	tb.Helper()
	if d.HostRing == nil {
		tb.Fatalf("descriptor %v names no ring frame", d)
	}
	return shmtest.HoldLock(tb, scope.Path(d.HostRing.Name))
}

// MustPut puts v and fails the test on an error.
func MustPut(tb testing.TB, c connector.Transport, from, to, key string, v any) connector.Descriptor {
	tb.Helper()
	_, d, err := c.Put(from, to, key, v)
	if err != nil {
		tb.Fatalf("put %q: %v", key, err)
	}
	return d
}

// PutGetLoop is a benchmark's loop of one put by sender and one get by
// receiver of key on edge 0->1, with allocations reported: the transport's
// CPU cost per pair.
func PutGetLoop(b *testing.B, sender, receiver connector.Transport, key string, payload any) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := sender.Put("0", "1", key, payload); err != nil {
			b.Fatal(err)
		}
		if _, _, ok, err := receiver.Get("0", "1", key, nil); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// MustGet claims key and fails the test on a miss or an error.
func MustGet(tb testing.TB, c connector.Transport, from, to, key string, d *connector.Descriptor) any {
	tb.Helper()
	v, _, ok, err := c.Get(from, to, key, d)
	if err != nil || !ok {
		tb.Fatalf("get %q: ok=%v err=%v", key, ok, err)
	}
	return v
}

// ParseDescriptor parses line, the descriptor of key a child printed (as
// Roles.Put does), and fails the test unless it is one.
func ParseDescriptor(tb testing.TB, line, key string) *connector.Descriptor {
	tb.Helper()
	d, err := descriptor.Parse([]byte(line), key)
	if err != nil {
		tb.Fatalf("descriptor %q: %v", line, err)
	}
	return d
}

// Missing fails the test unless a get of key misses without an error.
func Missing(tb testing.TB, c connector.Transport, from, to, key string, d *connector.Descriptor) {
	tb.Helper()
	v, _, ok, err := c.Get(from, to, key, d)
	if err != nil || ok {
		tb.Fatalf("get %q: want a miss, got ok=%v v=%v err=%v", key, ok, v, err)
	}
}

// Codes returns {"codes": int64[n]} with values start, start+1, ...
func Codes(n int, start int64) map[string]any {
	vals := make([]int64, n)
	for i := range vals {
		vals[i] = start + int64(i)
	}
	t, _ := tensor.FromSlice(vals)
	return map[string]any{"codes": t}
}

// Int64s returns the values of v, which must be an int64 tensor.
func Int64s(tb testing.TB, v any) []int64 {
	tb.Helper()
	tt, ok := v.(*tensor.Tensor)
	if !ok {
		tb.Fatalf("want a tensor, got %T", v)
	}
	vals, err := tensor.Values[int64](tt)
	if err != nil {
		tb.Fatal(err)
	}
	return vals
}

// CodesOf returns the values of a Codes payload as received.
func CodesOf(tb testing.TB, payload any) []int64 {
	tb.Helper()
	m, ok := payload.(map[string]any)
	if !ok {
		tb.Fatalf("want a map, got %T", payload)
	}
	return Int64s(tb, m["codes"])
}

// RemoveAtEnd removes, when the test ends, what producers of names that were
// killed without Close may leave: their rings, the ring directory with its
// markers, the wake directory with its FIFOs, and the segments and lock
// files of keys starting with one of keyPrefixes (`omnishm prune` does this
// in a deployment; the crash watchdog may have removed some already). Call
// it before opening the test's connectors, so it runs after they close.
func RemoveAtEnd(tb testing.TB, names scope.Names, keyPrefixes ...string) {
	tb.Cleanup(func() {
		os.RemoveAll(names.RingDir())
		os.RemoveAll(names.WakeDir)
		for _, path := range Files(names, keyPrefixes...) {
			os.Remove(path)
		}
	})
}

// KeyFiles returns the per-key segment and lock file of key in /dev/shm
// (SPEC §6), where a connector puts them.
func KeyFiles(key string) []string { return shmtest.KeyFiles(scope.ShmDir, key) }

// CrashScope is shmtest.Scope for a test whose producers may be killed
// without Close: what they leave on it, and the segments and lock files of
// keys starting with one of keyPrefixes, is removed when the test ends
// (RemoveAtEnd). Call it before opening the test's connectors.
func CrashScope(tb testing.TB, keyPrefixes ...string) string {
	tb.Helper()
	s := shmtest.Scope(tb)
	RemoveAtEnd(tb, scope.New(s), keyPrefixes...)
	return s
}

// Files lists what is in /dev/shm of names and of keys starting with one of
// keyPrefixes: the ring and wake directories and what is in them, ring
// files, segments and lock files.
func Files(names scope.Names, keyPrefixes ...string) []string {
	var files []string
	for _, dir := range []string{names.RingDir(), names.WakeDir} {
		entries, err := os.ReadDir(dir)
		if err == nil {
			files = append(files, dir)
		}
		for _, e := range entries {
			files = append(files, dir+"/"+e.Name())
		}
	}
	entries, _ := os.ReadDir(scope.ShmDir)
	for _, e := range entries {
		n := e.Name()
		key, isLock := scope.LockKey(n)
		if !isLock {
			key = n
		}
		if strings.HasPrefix(n, names.RingPrefix()) || slices.ContainsFunc(keyPrefixes, func(p string) bool { return strings.HasPrefix(key, p) }) {
			files = append(files, scope.Path(n))
		}
	}
	return files
}

// ChildCodes is CodesOf without a test to fail, for a child that reports
// what it got: [-1] when payload is not a non-empty Codes payload.
func ChildCodes(payload any) []int64 {
	m, _ := payload.(map[string]any)
	tt, _ := m["codes"].(*tensor.Tensor)
	if tt == nil {
		return []int64{-1}
	}
	vals, err := tensor.Values[int64](tt)
	if err != nil || len(vals) == 0 {
		return []int64{-1}
	}
	return vals
}
