//go:build linux

package connector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"omnishm/keys"
	"omnishm/scope"
	"omnishm/shmstate"
)

// RecvTimeoutError is the error of a Recv whose context's deadline passed
// before its key arrived. It unwraps to the context's error, so
// errors.Is(err, context.DeadlineExceeded) holds. Its message names the
// scope and what the receiver saw on the edge, so a producer in another
// scope or a stage id typed wrong shows at once.
type RecvTimeoutError struct {
	// Scope is the connector's WakeupScope; "" is the scope keyed by the
	// parent pid (SPEC §2), which only processes of one parent share. A
	// transport other than SHM leaves it "" and says where it looked
	// (NewRecvTimeoutError).
	Scope string
	// From, To and Key are what the Recv waited for: edge From->To.
	From, To, Key string

	err   error         // the context's
	names scope.Names   // the connector's
	ppid  int           // the parent pid its names are keyed by (no scope)
	where string        // another transport's Where
	look  func() string // another transport's Saw
	once  sync.Once
	saw   string
}

// NewRecvTimeoutError is the RecvTimeoutError of a transport other than
// SHM, whose Recv of key on edge from->to ended with err, its context's
// deadline error: where is what Where returns (the bucket, the stream),
// and saw, called once the first time Saw is asked for, describes what
// the transport finds there now, so a caller that drops the error pays
// nothing for it.
func NewRecvTimeoutError(where, from, to, key string, err error, saw func() string) *RecvTimeoutError {
	return &RecvTimeoutError{From: from, To: to, Key: key, err: err, where: where, look: saw}
}

// Error says what was waited for, in which scope, and what the receiver
// sees on the edge (Saw).
func (e *RecvTimeoutError) Error() string {
	return fmt.Sprintf("connector: recv %q on edge %s->%s, %s: nothing arrived before the deadline; saw %s",
		keys.Shorten(e.Key), e.From, e.To, e.Where(), e.Saw())
}

// Where names the scope the receiver looked in: `scope "name"`, or for no
// scope the parent pid its names are keyed by; for another transport, the
// where it gave NewRecvTimeoutError.
func (e *RecvTimeoutError) Where() string {
	if e.where != "" {
		return e.where
	}
	if e.Scope == "" {
		return fmt.Sprintf("no scope (names keyed by the parent pid %d)", e.ppid)
	}
	return fmt.Sprintf("scope %q", e.Scope)
}

// Unwrap returns the context's error: context.DeadlineExceeded.
func (e *RecvTimeoutError) Unwrap() error { return e.err }

// Saw describes what is on the edge in /dev/shm: the producers' rings of
// this scope and of others, and the key's per-key files (for another
// transport, what its NewRecvTimeoutError's saw reports). It is looked up
// (a read-only scan that takes no lock another process holds) the first
// time it is asked for, not when the Recv gives up: a caller that drops
// the error pays nothing.
func (e *RecvTimeoutError) Saw() string {
	e.once.Do(func() {
		if e.look != nil {
			e.saw = e.look()
		} else {
			e.saw = sawOnEdge(e.names, e.From, e.To, e.Key)
		}
	})
	return e.saw
}

// recvErr is the error of a Recv whose ctx ended: ctx.Err(), or for a
// deadline a RecvTimeoutError.
func (c *SHM) recvErr(ctx context.Context, from, key string) error {
	err := ctx.Err()
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &RecvTimeoutError{Scope: c.opts.WakeupScope, From: from, To: string(c.opts.StageID), Key: key, err: err, names: c.names, ppid: c.parent}
}

// maxListed bounds the other scopes a timeout's message names.
const maxListed = 3

// sawOnEdge summarises what a receiver of key on edge from->to of names'
// scope finds in /dev/shm, for a timeout's message.
func sawOnEdge(names scope.Names, from, to, key string) string {
	// Headers only: counting rings needs no ring lock, and a scan of every
	// scope's rings must not make other receivers' gets miss.
	st, err := shmstate.Scan(shmstate.Options{KeyPrefix: key, NoFrames: true})
	if err != nil {
		return "nothing: /dev/shm could not be read (" + err.Error() + ")"
	}
	var parts []string
	var here, others, elsewhere []string // rings of the edge in this scope; of other edges to this stage; of the edge in other scopes
	for _, sc := range st.Scopes {
		for _, e := range sc.Edges() {
			switch {
			case sc.RingDir == names.RingDirName && e.From == from && e.To == to:
				here = append(here, ringCount(e)+" on the edge")
			case sc.RingDir == names.RingDirName && e.To == to:
				others = append(others, e.From+"->"+e.To)
			case e.From == from && e.To == to:
				name := sc.RingDir
				if sc.Name != "" {
					name = fmt.Sprintf("scope %q", sc.Name)
				}
				elsewhere = append(elsewhere, ringCount(e)+" in "+name)
			}
		}
	}
	if len(here) == 0 {
		parts = append(parts, "no producer ring on the edge")
	} else {
		parts = append(parts, here...)
	}
	if len(others) > 0 {
		slices.Sort(others)
		parts = append(parts, "rings of other edges to stage "+to+": "+strings.Join(others, ", "))
	}
	if len(elsewhere) > 0 {
		slices.Sort(elsewhere)
		if n := len(elsewhere) - maxListed; n > 0 {
			elsewhere = append(elsewhere[:maxListed], fmt.Sprintf("%d more", n))
		}
		parts = append(parts, "rings of this edge in another scope ("+strings.Join(elsewhere, "; ")+
			"): if the producer is there, both ends must open with the same WakeupScope")
	}
	parts = append(parts, perKeySeen(st, key))
	return strings.Join(parts, ", ")
}

// ringCount is "1 ring of a live producer" or "N rings (L of live
// producers, D of dead ones)" for one edge's summary.
func ringCount(e shmstate.EdgeSummary) string {
	switch {
	case e.Rings == 1 && e.Dead == 0:
		return "1 ring of a live producer"
	case e.Rings == 1:
		return "1 ring of a dead producer"
	}
	return fmt.Sprintf("%d rings (%d of live producers, %d of dead ones)", e.Rings, e.Rings-e.Dead, e.Dead)
}

// perKeySeen says what per-key files of key exist (SPEC §6).
func perKeySeen(st *shmstate.State, key string) string {
	for _, s := range st.Segments {
		if s.Key == key {
			return fmt.Sprintf("a per-key segment of the key (%d bytes) present but not claimed (its lock held by another process, or it came at the deadline)", s.Size)
		}
	}
	for _, l := range st.Locks {
		if l.Key == key {
			return "the key's lock file but no segment (a per-key put in progress, or a claim)"
		}
	}
	return "no per-key segment of the key"
}
