//go:build linux

package stream

import (
	"context"
	"errors"
	"sync"

	"omnishm/proc"
)

// exitWatch watches one sender process for its exit. Readers of the same
// sender share it, so a stage reading many requests of one producer holds
// one pidfd, not one per request. Where the kernel has no pidfds it asks
// proc.Check instead; "unknown" never counts as exited.
type exitWatch struct {
	id     proc.ID
	refs   int             // under watchesMu
	h      *proc.Handle    // nil without pidfds
	exited context.Context // done once the process exited; nil without pidfds
	mark   context.CancelFunc
}

var (
	watchesMu sync.Mutex
	watches   = map[proc.ID]*exitWatch{}
)

// watchExit returns the watch of id; the caller must release it.
func watchExit(id proc.ID) *exitWatch {
	watchesMu.Lock()
	defer watchesMu.Unlock()
	if w := watches[id]; w != nil {
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
			// Wait ends with os.ErrClosed once the last reader released h.
			if h.Wait(context.Background()) == nil {
				w.mark()
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
