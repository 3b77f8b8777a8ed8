package wire

import "math"

// Reader reads msgpack one value at a time, for a decoder of a fixed layout
// that knows which type comes next (the tensor frame's header, SPEC §4). It
// is Decoder's reader: every length is checked against the bytes left
// before use, so bad input gives an error wrapping ErrCorrupt and never
// reads out of bounds or allocates for a forged length. After an error the
// position is unspecified: stop reading.
//
// Ownership: the bytes returned by Bin, Str and Ext alias the input and are
// valid as long as it is; copy what must outlive it. A Reader never writes
// to its input. The zero Reader has nothing to read.
type Reader struct {
	s decodeState
}

// NewReader returns a Reader at the start of b.
func NewReader(b []byte) *Reader {
	return &Reader{s: decodeState{b: b}}
}

// Len is the number of bytes not read yet.
func (r *Reader) Len() int { return len(r.s.b) - r.s.pos }

// next takes the next type byte.
func (r *Reader) next() (byte, error) {
	if r.s.pos >= len(r.s.b) {
		return 0, r.s.truncated()
	}
	r.s.pos++
	return r.s.b[r.s.pos-1], nil
}

// mismatch reports the type byte c just taken as not the one wanted.
func (r *Reader) mismatch(c byte, want string) error {
	return corrupt("0x%02x at offset %d where %s belongs", c, r.s.pos-1, want)
}

// ArrayLen reads an array's header and returns its number of elements,
// which is at most Len() (each takes at least a byte). The elements follow.
func (r *Reader) ArrayLen() (int, error) {
	// The fixarray form in line: a fixed layout is mostly short arrays.
	if b := r.s.b[r.s.pos:]; len(b) > 0 && b[0]>>4 == fixArray>>4 && int(b[0]&0x0f) < len(b) {
		r.s.pos++
		return int(b[0] & 0x0f), nil
	}
	return r.arrayLen()
}

func (r *Reader) arrayLen() (int, error) {
	c, err := r.next()
	switch {
	case err != nil:
		return 0, err
	case c >= fixArray && c < fixStr:
		if n := int(c & 0x0f); n <= r.Len() {
			return n, nil
		}
		return 0, corrupt("array of %d past the end at offset %d", c&0x0f, r.s.pos)
	case c == codeArray16 || c == codeArray32:
		return r.s.length(2 << (c - codeArray16))
	}
	return 0, r.mismatch(c, "an array")
}

// Bin reads a bin and returns its bytes, aliasing the input.
func (r *Reader) Bin() ([]byte, error) {
	// The bin8 form in line (a nonce, a small tree).
	if b := r.s.b[r.s.pos:]; len(b) > 1 && b[0] == codeBin8 && int(b[1]) <= len(b)-2 {
		n := int(b[1])
		r.s.pos += 2 + n
		return b[2 : 2+n : 2+n], nil
	}
	return r.bin()
}

func (r *Reader) bin() ([]byte, error) {
	c, err := r.next()
	switch {
	case err != nil:
		return nil, err
	case c >= codeBin8 && c <= codeBin32:
		return r.s.bin(c)
	}
	return nil, r.mismatch(c, "a bin")
}

// Str reads a str and returns its bytes: valid UTF-8 aliasing the input
// (m[string(p)] looks it up in a map without a copy).
func (r *Reader) Str() ([]byte, error) {
	// A short fixstr (a dtype name) in line.
	if b := r.s.b[r.s.pos:]; len(b) > 0 && b[0]>>4 == fixStr>>4 && int(b[0]&0x0f) < len(b) {
		if p := b[1 : 1+b[0]&0x0f]; validUTF8(p) {
			r.s.pos += 1 + len(p)
			return p[:len(p):len(p)], nil
		}
	}
	return r.str()
}

func (r *Reader) str() ([]byte, error) {
	c, err := r.next()
	switch {
	case err != nil:
		return nil, err
	case c >= fixStr && c < codeNil:
		return r.s.strBytes(int(c & 0x1f))
	case c >= codeStr8 && c <= codeStr32:
		n, err := r.s.length(1 << (c - codeStr8))
		if err != nil {
			return nil, err
		}
		return r.s.strBytes(n)
	}
	return nil, r.mismatch(c, "a str")
}

// Int reads an integer, in any of msgpack's forms, whose value fits an
// int64.
func (r *Reader) Int() (int64, error) {
	start := r.s.pos
	u, negative, err := r.integer()
	if err == nil && !negative && u > math.MaxInt64 {
		return 0, corrupt("integer %d past int64 at offset %d", u, start)
	}
	return int64(u), err
}

// Uint reads an integer, in any of msgpack's forms, whose value is not
// negative (a signed form holding a non-negative value included).
func (r *Reader) Uint() (uint64, error) {
	// A positive fixint (a small dimension or offset) in line.
	if b := r.s.b[r.s.pos:]; len(b) > 0 && b[0] <= 0x7f {
		r.s.pos++
		return uint64(b[0]), nil
	}
	return r.uint()
}

func (r *Reader) uint() (uint64, error) {
	start := r.s.pos
	u, negative, err := r.integer()
	if err == nil && negative {
		return 0, corrupt("negative integer %d at offset %d where a non-negative one belongs", int64(u), start)
	}
	return u, err
}

// integer reads an integer of any form: a negative one as the bits of its
// int64, any other as its uint64.
func (r *Reader) integer() (u uint64, negative bool, err error) {
	c, err := r.next()
	switch {
	case err != nil:
		return 0, false, err
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= codeUint8 && c <= codeUint64:
		u, err := r.s.uint(1 << (c - codeUint8))
		return u, false, err
	case fitsInt64(c): // the negative fixints and the signed forms
		x, err := r.s.signed(c)
		return uint64(x), x < 0, err
	}
	return 0, false, r.mismatch(c, "an integer")
}

// Ext reads an extension; its Data aliases the input.
func (r *Reader) Ext() (Ext, error) {
	c, err := r.next()
	switch {
	case err != nil:
		return Ext{}, err
	case c >= codeExt8 && c <= codeExt32, c >= codeFixExt1 && c <= codeFixE16:
		return r.s.rawExt(c)
	}
	return Ext{}, r.mismatch(c, "an extension")
}

// Skip passes over the next value, a container with all it holds. It
// checks the value's structure (lengths, reserved type bytes), not its
// content: strings are not checked for UTF-8 nor marker maps built.
func (r *Reader) Skip() error {
	return r.s.skip()
}
