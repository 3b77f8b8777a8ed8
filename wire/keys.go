package wire

import (
	"hash/maphash"
	"sync/atomic"
	"unicode/utf8"
)

// Payload maps repeat the same few keys ("codes", "audio", "finished") in
// every message. A small fixed table of recently seen short keys lets a
// decoded key reuse one string instead of allocating each time, and the
// encoder remember keys without allocating (oneKeys); its size is bounded,
// so hostile keys only evict each other.
const keyCacheSize = 1024

var (
	keyCache [keyCacheSize]atomic.Pointer[string]
	keySeed  = maphash.MakeSeed()
)

// stringKey reads a fixstr map key (up to 31 bytes) through the cache; ok
// is false, and nothing is consumed, for any other key.
func (s *decodeState) stringKey() (string, bool) {
	if s.pos >= len(s.b) {
		return "", false
	}
	c := s.b[s.pos]
	if c < fixStr || c >= codeNil || int(c&0x1f) > len(s.b)-s.pos-1 {
		return "", false
	}
	n := int(c & 0x1f)
	p := s.b[s.pos+1 : s.pos+1+n]
	slot := &keyCache[maphash.Bytes(keySeed, p)%keyCacheSize]
	if k := slot.Load(); k != nil && *k == string(p) {
		s.pos += 1 + n
		return *k, true
	}
	if !utf8.Valid(p) {
		return "", false // value() reports it
	}
	k := string(p)
	slot.Store(&k)
	s.pos += 1 + n
	return k, true
}

// interned is key as the table holds it, added if absent: the one
// allocation is a key's first (or its return after an eviction).
func interned(key string) *string {
	slot := &keyCache[maphash.String(keySeed, key)%keyCacheSize]
	if k := slot.Load(); k != nil && *k == key {
		return k
	}
	k := new(string) // not &key: that would allocate on every call
	*k = key
	slot.Store(k)
	return k
}
