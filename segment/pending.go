package segment

import "container/list"

// pendingSet is a producer's published-but-not-known-consumed keys, in
// insertion order so the consumed-key sweep can go round-robin like the
// Python OrderedDict (popitem(last=False), re-insert at the end).
type pendingSet struct {
	order *list.List // of string
	index map[string]*list.Element
}

func newPendingSet() pendingSet {
	return pendingSet{order: list.New(), index: make(map[string]*list.Element)}
}

func (s *pendingSet) len() int { return len(s.index) }

func (s *pendingSet) has(key string) bool { _, ok := s.index[key]; return ok }

// add records key; a key already present keeps its place.
func (s *pendingSet) add(key string) {
	if _, ok := s.index[key]; !ok {
		s.index[key] = s.order.PushBack(key)
	}
}

// remove forgets key and reports whether it was present.
func (s *pendingSet) remove(key string) bool {
	e, ok := s.index[key]
	if ok {
		s.order.Remove(e)
		delete(s.index, key)
	}
	return ok
}

// rotate visits up to n keys from the front; keep says whether each stays,
// and a kept key moves to the back. It returns the keys it dropped.
func (s *pendingSet) rotate(n int, keep func(key string) bool) []string {
	var dropped []string
	for i := 0; i < n && s.order.Len() > 0; i++ {
		e := s.order.Front()
		key := e.Value.(string)
		if keep(key) {
			s.order.MoveToBack(e)
			continue
		}
		s.order.Remove(e)
		delete(s.index, key)
		dropped = append(dropped, key)
	}
	return dropped
}

// keys returns every key, oldest first, filtered by match when it is non-nil.
func (s *pendingSet) keys(match func(string) bool) []string {
	var out []string
	for e := s.order.Front(); e != nil; e = e.Next() {
		if k := e.Value.(string); match == nil || match(k) {
			out = append(out, k)
		}
	}
	return out
}
