//go:build linux

package segment

import "container/list"

// pendingSet is a producer's published-but-not-known-consumed keys, in
// insertion order so the consumed-key sweep can go round-robin like the
// Python OrderedDict (popitem(last=False), re-insert at the end). Each key
// keeps the identity of the segment this producer wrote, so a segment
// re-created under the same key by another producer is never taken for it.
type pendingSet struct {
	order *list.List // of pendingKey
	index map[string]*list.Element
}

type pendingKey struct {
	key string
	id  fileID
}

func (s *pendingSet) len() int { return len(s.index) }

// lookup returns the identity key was recorded with, if it is there.
func (s *pendingSet) lookup(key string) (fileID, bool) {
	e, ok := s.index[key]
	if !ok {
		return fileID{}, false
	}
	return e.Value.(pendingKey).id, true
}

// add records key and its segment's identity; a key already present keeps
// its place and takes the new identity. The zero pendingSet is empty and
// ready: add makes its storage.
func (s *pendingSet) add(key string, id fileID) {
	if s.index == nil {
		s.order, s.index = list.New(), make(map[string]*list.Element)
	}
	if e, ok := s.index[key]; ok {
		e.Value = pendingKey{key, id}
		return
	}
	s.index[key] = s.order.PushBack(pendingKey{key, id})
}

// remove forgets key and returns the identity it was recorded with.
func (s *pendingSet) remove(key string) (fileID, bool) {
	e, ok := s.index[key]
	if !ok {
		return fileID{}, false
	}
	s.order.Remove(e)
	delete(s.index, key)
	return e.Value.(pendingKey).id, true
}

// rotate visits up to n keys from the front; keep says whether each stays,
// and a kept key moves to the back. It returns the keys it dropped.
func (s *pendingSet) rotate(n int, keep func(key string, id fileID) bool) []string {
	var dropped []string
	for i := 0; i < n && s.len() > 0; i++ {
		e := s.order.Front()
		pk := e.Value.(pendingKey)
		if keep(pk.key, pk.id) {
			s.order.MoveToBack(e)
			continue
		}
		s.order.Remove(e)
		delete(s.index, pk.key)
		dropped = append(dropped, pk.key)
	}
	return dropped
}

// keys returns every key, oldest first, filtered by match when it is non-nil.
func (s *pendingSet) keys(match func(string) bool) []string {
	var out []string
	if s.order == nil {
		return nil
	}
	for e := s.order.Front(); e != nil; e = e.Next() {
		if k := e.Value.(pendingKey).key; match == nil || match(k) {
			out = append(out, k)
		}
	}
	return out
}
