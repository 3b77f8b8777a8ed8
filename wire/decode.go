package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"

	"omnishm/tensor"
)

// Decoder reads the msgpack form. Its zero value decodes like Unmarshal; the
// fields exist for the tensor frame codec (SPEC §4) and for callers that
// need maps in their wire order.
type Decoder struct {
	// Ext, if set, sees each extension first (the tensor frame's
	// references).
	Ext ExtDecoder
	// Ordered decodes maps as Map, in wire order, instead of Go maps.
	Ordered bool
	// Owned says the caller hands b over: bins of at least OwnedAliasMin
	// bytes (tensor data, in practice) alias b instead of being copied.
	// Smaller ones are still copied, so keeping one does not pin all of b.
	Owned bool
}

// ExtDecoder decodes extensions for a Decoder. (An interface, not a func:
// a decoder with state of its own then costs no closure per message.)
type ExtDecoder interface {
	// DecodeExt sees one extension. Its Data aliases the input and is
	// valid only during the call. If it reports ok, v replaces the
	// extension; otherwise the extension decodes as a literal Ext.
	DecodeExt(e Ext) (v any, ok bool, err error)
}

// OwnedAliasMin is the smallest bin that Decoder.Owned lets alias the input.
const OwnedAliasMin = 64 << 10

type decodeState struct {
	Decoder // a copy, so the caller's Decoder does not escape
	b       []byte
	pos     int
	depth   int
	// pending counts the items that open arrays and maps still owe, each at
	// least one byte: nested containers that each declare the whole rest of
	// the input would otherwise allocate depth times its size.
	pending int
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// Decode decodes the single msgpack value filling b; see Unmarshal for the
// Go types it yields. The result never aliases b, unless Owned is set.
func (d *Decoder) Decode(b []byte) (any, error) {
	s := decodeState{Decoder: *d, b: b}
	v, ok, err := s.oneExtEntry()
	if !ok && err == nil {
		v, err = s.value()
	}
	if err != nil {
		return nil, err
	}
	if s.pos != len(b) {
		return nil, corrupt("%d trailing bytes", len(b)-s.pos)
	}
	return v, nil
}

// oneExtEntry reads a value that is a map of one fixstr key, not a leaf
// marker, to an extension: the tree of a tensor frame of one tensor
// ({"data": reference}), which a stage sends message after message. It
// reads it without the general walk (a dispatch, a container check and a
// loop per level: as much as the rest of the tree's decoding), and its
// result is value()'s for those bytes. ok is false, with nothing
// consumed, for any other value.
func (s *decodeState) oneExtEntry() (_ any, ok bool, _ error) {
	b := s.b[s.pos:]
	if s.Ordered || len(b) < 3 || b[0] != fixMap|1 || b[1] < fixStr || b[1] >= codeNil {
		return nil, false, nil
	}
	at := 2 + int(b[1]&0x1f) // the value's first byte
	if at >= len(b) {
		return nil, false, nil
	}
	c := b[at]
	if c != codeExt8 && c != codeExt16 && c != codeExt32 && (c < codeFixExt1 || c > codeFixE16) {
		return nil, false, nil
	}
	start := s.pos
	s.pos++
	k, isString := s.stringKey()
	if !isString || maybeMarker(k) {
		s.pos = start
		return nil, false, nil
	}
	s.pos++
	v, err := s.ext(c)
	if err != nil {
		return nil, true, err
	}
	return map[string]any{k: v}, true, nil
}

func (s *decodeState) take(n int) ([]byte, error) {
	if n < 0 || n > len(s.b)-s.pos {
		return nil, corrupt("length %d past the end at offset %d", n, s.pos)
	}
	p := s.b[s.pos : s.pos+n : s.pos+n]
	s.pos += n
	return p, nil
}

func (s *decodeState) uint(n int) (uint64, error) {
	p, err := s.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	}
	return binary.BigEndian.Uint64(p), nil
}

// length reads an n-byte length and checks it against the bytes left, so a
// forged length never allocates (containers check their items in enter).
func (s *decodeState) length(n int) (int, error) {
	l, err := s.uint(n)
	if err != nil {
		return 0, err
	}
	if l > uint64(len(s.b)-s.pos) {
		return 0, corrupt("length %d past the end at offset %d", l, s.pos)
	}
	return int(l), nil
}

// truncated reports the end of the input where a value should start.
func (s *decodeState) truncated() error {
	return corrupt("truncated at offset %d", s.pos)
}

func (s *decodeState) value() (any, error) {
	if s.pos >= len(s.b) {
		return nil, s.truncated()
	}
	c := s.b[s.pos]
	s.pos++
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c >= fixMap && c < fixArray:
		return s.mapOf(int(c & 0x0f))
	case c >= fixArray && c < fixStr:
		return s.list(int(c & 0x0f))
	case c >= fixStr && c < codeNil:
		return s.str(int(c & 0x1f))
	}
	switch c {
	case codeNil:
		return nil, nil
	case codeFalse:
		return false, nil
	case codeTrue:
		return true, nil
	case codeBin8, codeBin16, codeBin32:
		p, err := s.bin(c)
		if err != nil {
			return nil, err
		}
		if s.Owned && len(p) >= OwnedAliasMin {
			return p, nil // capacity already ends at the bin
		}
		return append([]byte{}, p...), nil
	case codeExt8, codeExt16, codeExt32, codeFixExt1, codeFixExt2, codeFixExt4, codeFixExt8, codeFixE16:
		return s.ext(c)
	case codeFloat32:
		u, err := s.uint(4)
		return float64(math.Float32frombits(uint32(u))), err
	case codeFloat64:
		u, err := s.uint(8)
		return math.Float64frombits(u), err
	case codeUint8, codeUint16, codeUint32, codeUint64:
		u, err := s.uint(1 << (c - codeUint8))
		if err != nil {
			return nil, err
		}
		if u > math.MaxInt64 {
			return u, nil
		}
		return int64(u), nil
	case codeInt8:
		u, err := s.uint(1)
		return int64(int8(u)), err
	case codeInt16:
		u, err := s.uint(2)
		return int64(int16(u)), err
	case codeInt32:
		u, err := s.uint(4)
		return int64(int32(u)), err
	case codeInt64:
		u, err := s.uint(8)
		return int64(u), err
	case codeStr8, codeStr16, codeStr32:
		n, err := s.length(1 << (c - codeStr8))
		if err != nil {
			return nil, err
		}
		return s.str(n)
	case codeArray16, codeArray32:
		n, err := s.length(2 << (c - codeArray16))
		if err != nil {
			return nil, err
		}
		return s.list(n)
	case codeMap16, codeMap32:
		n, err := s.length(2 << (c - codeMap16))
		if err != nil {
			return nil, err
		}
		return s.mapOf(n)
	}
	return nil, corrupt("reserved type byte 0x%02x at offset %d", c, s.pos-1)
}

// fitsInt64 reports whether c is the type byte of an integer that always
// fits an int64: a negative fixint, an intN or a uint8..uint32.
func fitsInt64(c byte) bool {
	return c >= 0xe0 || c >= codeInt8 && c <= codeInt64 || c >= codeUint8 && c <= codeUint32
}

// signed reads the integer whose type byte c, one that fitsInt64, was just
// read.
func (s *decodeState) signed(c byte) (int64, error) {
	if c >= 0xe0 {
		return int64(int8(c)), nil
	}
	if c >= codeInt8 {
		n := 1 << (c - codeInt8)
		u, err := s.uint(n)
		return int64(u<<(64-8*n)) >> (64 - 8*n), err // sign-extend
	}
	u, err := s.uint(1 << (c - codeUint8))
	return int64(u), err
}

func (s *decodeState) str(n int) (any, error) {
	p, err := s.strBytes(n)
	if err != nil {
		return nil, err
	}
	return string(p), nil
}

// strBytes takes a str of n bytes, aliasing the input.
func (s *decodeState) strBytes(n int) ([]byte, error) {
	p, err := s.take(n)
	if err != nil {
		return nil, err
	}
	// msgspec refuses invalid UTF-8 in a str; so does the receiver here.
	if !validUTF8(p) {
		return nil, corrupt("invalid UTF-8 string at offset %d", s.pos-n)
	}
	return p, nil
}

// validUTF8 is utf8.Valid with a quicker pass for the short ASCII strings
// payloads are full of (keys, dtype names).
func validUTF8(p []byte) bool {
	if len(p) > 16 {
		return utf8.Valid(p)
	}
	for _, c := range p {
		if c >= utf8.RuneSelf {
			return utf8.Valid(p)
		}
	}
	return true
}

// bin takes the bin whose type byte c was just read, aliasing the input.
func (s *decodeState) bin(c byte) ([]byte, error) {
	n, err := s.length(1 << (c - codeBin8))
	if err != nil {
		return nil, err
	}
	return s.take(n)
}

// rawExt takes the extension whose type byte c was just read; its Data
// aliases the input.
func (s *decodeState) rawExt(c byte) (Ext, error) {
	var n int
	if c >= codeFixExt1 {
		n = 1 << (c - codeFixExt1)
	} else {
		var err error
		if n, err = s.length(1 << (c - codeExt8)); err != nil {
			return Ext{}, err
		}
	}
	if s.pos >= len(s.b) {
		return Ext{}, corrupt("truncated extension at offset %d", s.pos)
	}
	code := int8(s.b[s.pos])
	s.pos++
	p, err := s.take(n)
	return Ext{Code: code, Data: p}, err
}

// ext decodes an extension through the Ext hook, else as a literal Ext
// that owns its data.
func (s *decodeState) ext(c byte) (any, error) {
	e, err := s.rawExt(c)
	if err != nil {
		return nil, err
	}
	if s.Ext != nil {
		v, ok, err := s.Ext.DecodeExt(e)
		if err != nil {
			return nil, err
		}
		if ok {
			return v, nil
		}
	}
	e.Data = append([]byte{}, e.Data...)
	return e, nil
}

// enter opens a container of items values (two per map entry), checking
// them, with everything the enclosing containers still owe, against the
// bytes left before anything is allocated for them.
func (s *decodeState) enter(items int) error {
	s.depth++
	if s.depth > maxDepth {
		return corrupt("nesting deeper than %d", maxDepth)
	}
	if items > len(s.b)-s.pos-s.pending {
		return corrupt("container of %d values past the end at offset %d", items, s.pos)
	}
	s.pending += items
	return nil
}

func (s *decodeState) list(n int) (any, error) {
	if err := s.enter(n); err != nil {
		return nil, err
	}
	out := make([]any, n)
	var ints slab[int64]
	var floats slab[float64]
	for i := range out {
		s.pending--
		// Numbers the runtime would box one allocation each go to a slab.
		if s.pos < len(s.b) {
			switch c := s.b[s.pos]; {
			case fitsInt64(c):
				s.pos++
				x, err := s.signed(c)
				if err != nil {
					return nil, err
				}
				if x >= 0 && x <= 255 {
					out[i] = x // the runtime boxes small values without allocating
				} else {
					out[i] = ints.box(x, n-i, int64Type)
				}
				continue
			case c == codeFloat64:
				s.pos++
				u, err := s.uint(8)
				if err != nil {
					return nil, err
				}
				out[i] = floats.box(math.Float64frombits(u), n-i, float64Type)
				continue
			}
		}
		v, err := s.value()
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	s.depth--
	return out, nil
}

func (s *decodeState) mapOf(n int) (any, error) {
	if err := s.enter(2 * n); err != nil {
		return nil, err
	}
	var out any
	var err error
	marked := true
	if s.Ordered {
		out, err = s.orderedMap(n)
	} else {
		out, marked, err = s.goMap(n)
	}
	if err != nil {
		return nil, err
	}
	s.depth--
	if !marked {
		return out, nil
	}
	return restoreLeaf(out)
}

// maybeMarker is a cheap test that a key could be a marker: every marker
// starts with "__" and is 10 to 13 bytes long.
func maybeMarker(k string) bool {
	return len(k) >= len(tensorMarker) && len(k) <= len(imageMarker) && k[0] == '_' && k[1] == '_'
}

func (s *decodeState) orderedMap(n int) (Map, error) {
	m := make(Map, n)
	for i := range m {
		var k any
		var err error
		s.pending--
		if ks, ok := s.stringKey(); ok {
			k = ks
		} else if k, err = s.value(); err != nil {
			return nil, err
		}
		s.pending--
		v, err := s.value()
		if err != nil {
			return nil, err
		}
		m[i] = KV{k, v}
	}
	return m, nil
}

// goMap builds a map[string]any, switching to map[any]any at the first key
// that is not a string. Later duplicates win, as in a Python dict. marked
// reports a key that may be a leaf marker.
func (s *decodeState) goMap(n int) (_ any, marked bool, _ error) {
	var m map[string]any // made at the first string key: one map, not two
	var generic map[any]any
	for range n {
		s.pending--
		ks, isString := s.stringKey()
		var k any
		if !isString {
			var err error
			if k, err = s.value(); err != nil {
				return nil, false, err
			}
			ks, isString = k.(string)
		}
		s.pending--
		v, err := s.value()
		if err != nil {
			return nil, false, err
		}
		if isString && maybeMarker(ks) {
			marked = true
		}
		if isString && generic == nil {
			if m == nil {
				m = make(map[string]any, n)
			}
			m[ks] = v
			continue
		}
		if isString {
			k = ks
		}
		switch k.(type) {
		case nil, bool, int64, uint64, float64, string:
		default:
			return nil, false, corrupt("map key of type %T", k)
		}
		if generic == nil {
			generic = make(map[any]any, n)
			for ks, vs := range m {
				generic[ks] = vs
			}
		}
		generic[k] = v
	}
	if generic != nil {
		return generic, false, nil // leaves are maps of string keys
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, marked, nil
}

// leafMarkers are the marker keys of SPEC §5 and the leaves they mark.
var leafMarkers = [...]struct {
	key  string
	kind tensor.Kind
}{{tensorMarker, tensor.KindTensor}, {arrayMarker, tensor.KindArray}, {imageMarker, tensor.KindImage}}

// restoreLeaf turns a marker map whose marker is true into its leaf (SPEC
// §5); a marker that is false leaves an ordinary map.
func restoreLeaf(m any) (any, error) {
	var get func(string) (any, bool)
	switch x := m.(type) {
	case map[string]any:
		if x[tensorMarker] != true && x[arrayMarker] != true && x[imageMarker] != true {
			return m, nil
		}
		get = func(k string) (any, bool) { v, ok := x[k]; return v, ok }
	case Map:
		get = x.Get
	default:
		return m, nil
	}
	for _, l := range leafMarkers {
		if v, _ := get(l.key); v != true {
			continue
		}
		name, shape, data, err := leafFields(get, l.kind.NameField())
		var leaf any
		if err == nil {
			leaf, err = tensor.NewLeaf(l.kind, name, shape, data)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v: %w", ErrCorrupt, l.kind, err)
		}
		return leaf, nil
	}
	return m, nil
}

// leafFields reads a marker map's name field (dtype or mode), shape and
// data. The data was already copied out of the input by the decoder.
func leafFields(get func(string) (any, bool), nameKey string) (string, []int, []byte, error) {
	nv, _ := get(nameKey)
	name, ok := nv.(string)
	if !ok {
		return "", nil, nil, fmt.Errorf("%s is %T, not a string", nameKey, nv)
	}
	sv, _ := get("shape")
	dims, ok := sv.([]any)
	if !ok {
		return "", nil, nil, fmt.Errorf("shape is %T, not an array", sv)
	}
	shape := make([]int, len(dims))
	for i, d := range dims {
		n, ok := d.(int64)
		if !ok || n < 0 || n > math.MaxInt {
			return "", nil, nil, fmt.Errorf("%w: dimension %v", tensor.ErrShape, d)
		}
		shape[i] = int(n)
	}
	dv, _ := get("data")
	data, ok := dv.([]byte)
	if !ok {
		return "", nil, nil, fmt.Errorf("data is %T, not bytes", dv)
	}
	return name, shape, data, nil
}

// skip passes over one value without building it. Containers add their
// items to a count rather than recursing, so no nesting exhausts the
// stack; the count, like enter's, stays within the bytes left.
func (s *decodeState) skip() error {
	for left := 1; left > 0; left-- {
		if s.pos >= len(s.b) {
			return s.truncated()
		}
		c := s.b[s.pos]
		s.pos++
		n, items := 0, 0 // bytes to pass, values it holds
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0 || c == codeNil || c == codeFalse || c == codeTrue:
		case c >= fixMap && c < fixArray:
			items = 2 * int(c&0x0f)
		case c >= fixArray && c < fixStr:
			items = int(c & 0x0f)
		case c >= fixStr && c < codeNil:
			n = int(c & 0x1f)
		case c >= codeBin8 && c <= codeBin32:
			n, err = s.length(1 << (c - codeBin8))
		case c >= codeExt8 && c <= codeExt32:
			n, err = s.length(1 << (c - codeExt8))
			n++ // the code byte
		case c >= codeFixExt1 && c <= codeFixE16:
			n = 1 + 1<<(c-codeFixExt1)
		case c == codeFloat32:
			n = 4
		case c == codeFloat64:
			n = 8
		case c >= codeUint8 && c <= codeUint64:
			n = 1 << (c - codeUint8)
		case c >= codeInt8 && c <= codeInt64:
			n = 1 << (c - codeInt8)
		case c >= codeStr8 && c <= codeStr32:
			n, err = s.length(1 << (c - codeStr8))
		case c == codeArray16 || c == codeArray32:
			items, err = s.length(2 << (c - codeArray16))
		case c == codeMap16 || c == codeMap32:
			items, err = s.length(2 << (c - codeMap16))
			if items > (len(s.b)-s.pos)/2 {
				return corrupt("map of %d entries past the end at offset %d", items, s.pos)
			}
			items *= 2
		default:
			return corrupt("reserved type byte 0x%02x at offset %d", c, s.pos-1)
		}
		if err != nil {
			return err
		}
		if _, err := s.take(n); err != nil {
			return err
		}
		if items > len(s.b)-s.pos-(left-1) {
			return corrupt("container of %d values past the end at offset %d", items, s.pos)
		}
		left += items
	}
	return nil
}
