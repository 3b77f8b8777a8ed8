package wire

import "io"

// Pieces is a payload's msgpack form (exactly Marshal's bytes) held as a
// skeleton with the large leaf data left out, each noted where it belongs:
// a writer scatters the leaves' bytes straight from the caller's tensors
// into their destination (a per-key segment by pwritev, a ring slot), one
// copy per byte, with no intermediate buffer the size of the payload.
//
// A Pieces refers to the payload's data without copying it: the payload
// must not change until the Pieces is written. The zero value is ready for
// MarshalPieces, and reusing one keeps its buffers.
type Pieces struct {
	skeleton []byte
	cuts     []cut
	min      int
	size     int
}

// cut is leaf data left out of the skeleton: it goes at skeleton[at:].
type cut struct {
	at   int
	data []byte
}

// MarshalPieces encodes v into p as Marshal would, leaving out the data of
// every tensor, array and image of at least min bytes (min ≤ 0: all of
// them).
func MarshalPieces(p *Pieces, v any, min int) error {
	clear(p.cuts) // the last payload's data is the caller's
	p.skeleton, p.cuts, p.min, p.size = p.skeleton[:0], p.cuts[:0], max(min, 0), 0
	s := encodeState{cuts: p}
	b, err := s.encode(p.skeleton, v)
	s.done()
	if err != nil {
		p.Reset()
		return err
	}
	p.skeleton, p.size = b, len(b)
	for _, c := range p.cuts {
		p.size += len(c.data)
	}
	return nil
}

// Reset drops p's references to the last payload's data, keeping its
// buffers.
func (p *Pieces) Reset() {
	clear(p.cuts)
	p.skeleton, p.cuts, p.size = p.skeleton[:0], p.cuts[:0], 0
}

// Size is the length of the msgpack form.
func (p *Pieces) Size() int { return p.size }

// Parts appends the form's parts, in order, to dst: skeleton bytes and leaf
// data, which together are the msgpack form. The parts alias p's skeleton
// and the payload's data.
func (p *Pieces) Parts(dst [][]byte) [][]byte {
	at := 0
	for _, c := range p.cuts {
		if c.at > at {
			dst = append(dst, p.skeleton[at:c.at])
		}
		dst = append(dst, c.data)
		at = c.at
	}
	if at < len(p.skeleton) || len(p.cuts) == 0 {
		dst = append(dst, p.skeleton[at:])
	}
	return dst
}

// Write copies the form into dst[:Size()]; dst shorter than that is
// io.ErrShortBuffer and nothing is written.
func (p *Pieces) Write(dst []byte) error {
	if len(dst) < p.size {
		return io.ErrShortBuffer
	}
	at, pos := 0, 0
	for _, c := range p.cuts {
		pos += copy(dst[pos:], p.skeleton[at:c.at])
		pos += copy(dst[pos:], c.data)
		at = c.at
	}
	copy(dst[pos:], p.skeleton[at:])
	return nil
}
