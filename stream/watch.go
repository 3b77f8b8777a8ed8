//go:build linux

package stream

import (
	"context"
	"errors"
	"slices"
	"sync"

	"omnishm/proc"
)

// exitWatch watches one sender process for its exit. Readers of the same
// sender share it, so a stage reading many requests of one producer holds
// one pidfd, not one per request. Where the kernel has no pidfds it asks
// proc.Check instead; "unknown" never counts as exited. The last release
// keeps a live process's watch idle (at most maxIdle of them), so readers
// of one-chunk requests, each done before the next begins, do not open a
// pidfd and read /proc per request.
type exitWatch struct {
	id     proc.ID
	refs   int             // under watchesMu
	h      *proc.Handle    // nil without pidfds
	exited context.Context // done once the process exited; nil without pidfds
	mark   context.CancelFunc
}

// maxIdle bounds the watches no reader holds that stay open.
const maxIdle = 8

var (
	watchesMu sync.Mutex
	watches   = map[proc.ID]*exitWatch{} // held or idle
	idle      []*exitWatch               // refs 0, oldest first
)

// watchExit returns the watch of id; the caller must release it.
func watchExit(id proc.ID) *exitWatch {
	watchesMu.Lock()
	defer watchesMu.Unlock()
	if w := watches[id]; w != nil {
		if w.refs == 0 {
			idle = slices.DeleteFunc(idle, func(x *exitWatch) bool { return x == w })
		}
		w.refs++
		return w
	}
	w := &exitWatch{id: id, refs: 1}
	h, err := proc.Open(id)
	switch {
	case err == nil:
		w.h = h
		w.exited, w.mark = context.WithCancel(context.Background())
		go func() {
			// Wait ends with os.ErrClosed once the watch is dropped.
			if h.Wait(context.Background()) == nil {
				w.mark()
				watchesMu.Lock()
				if w.refs == 0 && watches[w.id] == w { // idle: nothing left to watch
					idle = slices.DeleteFunc(idle, func(x *exitWatch) bool { return x == w })
					w.drop()
				}
				watchesMu.Unlock()
			}
		}()
	case errors.Is(err, proc.ErrNoProcess):
		w.exited, w.mark = context.WithCancel(context.Background())
		w.mark() // it exited before we looked
	}
	watches[id] = w
	return w
}

func (w *exitWatch) release() {
	watchesMu.Lock()
	defer watchesMu.Unlock()
	if w.refs--; w.refs > 0 {
		return
	}
	if w.exited == nil || w.gone() {
		w.drop() // no pidfd to keep, or nothing left to watch
		return
	}
	idle = append(idle, w)
	if len(idle) > maxIdle {
		idle[0].drop()
		idle = slices.Delete(idle, 0, 1)
	}
}

// drop forgets w and closes its pidfd; watchesMu is held.
func (w *exitWatch) drop() {
	delete(watches, w.id)
	if w.h != nil {
		w.h.Close()
	}
}

// gone reports whether the process has certainly exited.
func (w *exitWatch) gone() bool {
	if w.exited != nil {
		return w.exited.Err() != nil
	}
	return proc.Check(w.id) == proc.Dead
}
