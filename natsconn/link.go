//go:build linux

package natsconn

import (
	"context"
	"sync"
	"time"
)

// link follows the client's connection, as its handlers report it, so that
// a wait for the server can sleep until the connection changes instead of
// retrying against a socket that is down.
type link struct {
	mu      sync.Mutex
	up      bool
	closed  bool
	since   time.Time     // of the last change
	changed chan struct{} // closed at the next change
}

func newLink() *link {
	return &link{up: true, since: time.Now(), changed: make(chan struct{})}
}

func (l *link) set(up bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.up == up {
		return
	}
	l.up, l.since = up, time.Now()
	close(l.changed)
	l.changed = make(chan struct{})
}

// close marks the connection closed for good: waits end with ErrClosed.
func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed, l.up = true, false
		close(l.changed)
	}
}

// state returns whether the connection is up, since when it has been so,
// and a channel closed at its next change.
func (l *link) state() (up, closed bool, since time.Time, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up, l.closed, l.since, l.changed
}

// pause waits before another attempt after a failure whose outcome is not
// known: until the connection is back when it is down, otherwise for
// *backoff, which doubles up to maxBackoff (the server may be electing a
// stream leader). It returns ctx's error, or ErrClosed.
func (l *link) pause(ctx context.Context, backoff *time.Duration) error {
	up, closed, _, changed := l.state()
	if closed {
		return ErrClosed
	}
	var timer <-chan time.Time
	if up {
		t := time.NewTimer(*backoff)
		defer t.Stop()
		timer = t.C
		*backoff = min(2**backoff, maxBackoff)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-changed:
		// Down while the handler had not said so yet, or back up: retry.
	case <-timer:
	}
	if _, closed, _, _ := l.state(); closed {
		return ErrClosed
	}
	return nil
}

const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = 250 * time.Millisecond
)
