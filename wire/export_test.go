package wire

// DecodeWalk is d.Decode(b) through the general walk alone, without the
// fast path of a one-entry map to an extension (oneExtEntry), for the
// tests that check the two agree.
func DecodeWalk(d *Decoder, b []byte) (any, error) {
	s := decodeState{Decoder: *d, b: b}
	v, err := s.value()
	if err != nil {
		return nil, err
	}
	if s.pos != len(b) {
		return nil, corrupt("%d trailing bytes", len(b)-s.pos)
	}
	return v, nil
}
