//go:build linux

package natsconn

import (
	"container/list"
	"sync"
	"time"
)

// pendingPut is a publication of this connector that no receiver is known
// to have claimed: what Cleanup, CleanupPrefix and Close may retire.
type pendingPut struct {
	key     string // the application's key
	subject string
	seq     uint64
	id      string // its message id
	object  string // its object, if its bytes are in the object store
	at      time.Time
}

// pendingSet holds a connector's pending puts, one per subject, oldest
// first. Claims are not reported to producers, so a record only goes when
// it is retired, replaced, or older than the bucket's max age (the server
// has dropped the publication by then): the set holds at most the puts of
// one max age that no cleanup has retired.
type pendingSet struct {
	mu        sync.Mutex
	order     *list.List // of *pendingPut, by at
	bySubject map[string]*list.Element
}

func newPendingSet() *pendingSet {
	return &pendingSet{order: list.New(), bySubject: map[string]*list.Element{}}
}

// get returns the record of subject, if any.
func (s *pendingSet) get(subject string) (pendingPut, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.bySubject[subject]; ok {
		return *e.Value.(*pendingPut), true
	}
	return pendingPut{}, false
}

// add records p, replacing the subject's earlier record, and forgets the
// records older than expired.
func (s *pendingSet) add(p pendingPut, expired time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.bySubject[p.subject]; ok {
		s.order.Remove(e)
	}
	s.bySubject[p.subject] = s.order.PushBack(&p)
	for e := s.order.Front(); e != nil && e.Value.(*pendingPut).at.Before(expired); e = s.order.Front() {
		s.order.Remove(e)
		delete(s.bySubject, e.Value.(*pendingPut).subject)
	}
}

// forget drops the record of subject if it is still the publication at seq.
func (s *pendingSet) forget(subject string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.bySubject[subject]; ok && e.Value.(*pendingPut).seq == seq {
		s.order.Remove(e)
		delete(s.bySubject, subject)
	}
}

// take removes and returns the records whose key match selects (all of
// them for nil).
func (s *pendingSet) take(match func(key string) bool) []pendingPut {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []pendingPut
	for e := s.order.Front(); e != nil; {
		next := e.Next()
		if p := e.Value.(*pendingPut); match == nil || match(p.key) {
			out = append(out, *p)
			s.order.Remove(e)
			delete(s.bySubject, p.subject)
		}
		e = next
	}
	return out
}
