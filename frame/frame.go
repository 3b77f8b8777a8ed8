// Package frame is the tensor frame (SPEC §4, payload kind 1): a msgpack
// header naming each tensor's dtype, shape and offset, then the tensors' raw
// bytes, 16-aligned, so a producer copies tensor data straight into shared
// memory and a receiver copies it straight out. A payload without tensors
// has no frame form: it travels as plain msgpack (kind 0, package wire).
//
// Sending is two steps, so the caller can reserve room before copying:
// Prepare walks the payload and lays the frame out, Size says how much room
// it needs, Write copies it into that room (a ring slot). Marshal does both
// into a new buffer. Receiving is Decode; Detect tells a frame from plain
// msgpack when the kind is not known. The msgpack of the header and the
// tree is package wire's: this package adds the layout, the references
// (ext 42 with the message's nonce) and the receiver's allocation rule.
//
// # Ownership
//
//   - A Prepared refers to the payload's tensors without copying them: they
//     must not change size until Write returns, and Write copies their
//     bytes as they are at that moment.
//   - Write writes only within dst[:Size()] and keeps no reference to dst.
//   - Decode returns a value that shares nothing with its input (SPEC §3:
//     no view of ring memory escapes); small frames' tensors share one
//     allocation, large frames' tensors each have their own (SPEC §4).
//   - DecodeInto puts the tensors' data in memory the receiver supplies
//     (an Allocator, such as an Arena over a recycled buffer): the caller
//     owns it before and after, and nothing keeps a reference to it.
//
// Bad input never panics or reads out of bounds: Decode's errors wrap
// ErrCorrupt (and wire.ErrCorrupt when the msgpack itself is bad).
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"

	"omnishm/tensor"
	"omnishm/wire"
)

// ErrTooLarge is returned by Prepare when the frame would exceed its limit;
// the caller sends the payload another way (SPEC §9's per-key segment).
var ErrTooLarge = errors.New("frame: payload larger than the limit")

// ErrCorrupt is returned (wrapped) by Decode for bytes that are not a valid
// tensor frame.
var ErrCorrupt = errors.New("frame: corrupt tensor frame")

const (
	refCode   = 42 // msgpack ext type of a tensor reference, SPEC §4
	nonceSize = 16
	refSize   = nonceSize + 4 // nonce || u32 LE index

	// ownerLimit is SPEC §4's receiver rule: up to this much tensor data
	// shares one allocation; beyond it each tensor gets its own.
	ownerLimit = 64 << 10
)

func align16(n int) int { return (n + 15) &^ 15 }

// region is one tensor's place in the frame's data area.
type region struct {
	t      *tensor.Tensor
	offset int
	size   int
}

// Prepared is a payload ready to be written: its header is encoded, its
// tensors are referenced, not copied. The source tensors must not change
// until Write returns.
type Prepared struct {
	tree      []byte // msgpack tree, tensors as references (or the plain form)
	desc      []byte // descriptors, without their array header
	regions   []region
	nonce     [nonceSize]byte
	ref       [refSize]byte // scratch for the reference being encoded
	headerLen int
	dataSize  int
	size      int
	limit     int
	enc       wire.Encoder // its hooks are p's methods, made once per Prepared

	// Inline storage: a small payload is prepared in one allocation.
	treeBuf    [256]byte
	descBuf    [64]byte
	regionsBuf [4]region
}

// prepared holds released Prepareds for reuse: a put prepares one payload
// after another, and each would otherwise allocate its Prepared and the
// tree buffer a larger payload grows.
var prepared = sync.Pool{New: func() any {
	p := new(Prepared)
	p.enc = wire.Encoder{Tensor: p.reference, CheckLeaf: p.checkLeaf}
	return p
}}

// keptTree bounds the tree buffer a released Prepared keeps for the next
// one: larger ones go to the garbage collector.
const keptTree = 64 << 10

// Prepare walks v once (see wire.Encoder for the accepted values). With
// tensors, it lays out a tensor frame; without, the result is v's plain
// msgpack form (payload kind 0, SPEC §4), exactly wire.Marshal's bytes. A
// typed numeric slice ([]float32, ...) is a tensor here as in wire: its
// bytes take the frame's raw path.
//
// limit > 0 bounds the frame: Prepare returns ErrTooLarge, before copying
// any tensor, array or image data, as soon as an array or image is larger
// than limit, the tensors' data passes it, or the whole frame would. Like
// the Python reference, a tensor-free result is only checked for its arrays
// and images; compare Size with the room you have.
//
// The caller may Release the result once done with it.
func Prepare(v any, limit int) (*Prepared, error) {
	p := prepared.Get().(*Prepared)
	if err := p.prepare(v, limit); err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

func (p *Prepared) prepare(v any, limit int) error {
	p.limit = limit
	if cap(p.tree) == 0 {
		p.tree = p.treeBuf[:0]
	}
	p.desc, p.regions = p.descBuf[:0], p.regionsBuf[:0]
	var err error
	if p.tree, err = p.enc.Append(p.tree, v); err != nil {
		return fmt.Errorf("frame: %w", err)
	}
	if len(p.regions) == 0 {
		p.size = len(p.tree)
		return nil
	}
	var scratch [8]byte
	p.headerLen = 1 + len(wire.AppendArrayHeader(scratch[:0], len(p.regions))) + len(p.desc) +
		len(wire.AppendBinHeader(scratch[:0], len(p.tree))) + len(p.tree) + 2 + nonceSize
	if uint64(p.headerLen) > math.MaxUint32 {
		return fmt.Errorf("frame: header of %d bytes: %w", p.headerLen, ErrTooLarge)
	}
	p.size = align16(4+p.headerLen) + p.dataSize
	if limit > 0 && p.size > limit {
		return fmt.Errorf("frame: %d bytes, limit %d: %w", p.size, limit, ErrTooLarge)
	}
	return nil
}

// Release hands p back for a later Prepare to reuse; the caller must not use
// p afterwards. It is optional: a Prepared never released is garbage
// collected.
func (p *Prepared) Release() {
	clear(p.regions) // the payload's tensors are the caller's
	if cap(p.tree) > keptTree {
		p.tree = nil
	}
	p.tree, p.desc, p.regions = p.tree[:0], nil, nil
	p.headerLen, p.dataSize, p.size, p.limit = 0, 0, 0, 0
	prepared.Put(p)
}

func (p *Prepared) checkLeaf(n int) error {
	if p.limit > 0 && n > p.limit {
		return fmt.Errorf("frame: leaf of %d bytes, limit %d: %w", n, p.limit, ErrTooLarge)
	}
	return nil
}

// reference records t's region and descriptor and returns its ext 42.
func (p *Prepared) reference(t *tensor.Tensor) (wire.Ext, error) {
	if len(p.regions) == 0 {
		p.newNonce()
	}
	offset := align16(p.dataSize)
	index := len(p.regions)
	if uint64(index) > math.MaxUint32 {
		return wire.Ext{}, fmt.Errorf("frame: %d tensors: %w", index, ErrTooLarge)
	}
	p.regions = append(p.regions, region{t: t, offset: offset, size: len(t.Data)})
	p.dataSize = offset + len(t.Data)
	if p.limit > 0 && p.dataSize > p.limit {
		return wire.Ext{}, fmt.Errorf("frame: tensor data passes %d bytes, limit %d: %w", p.dataSize, p.limit, ErrTooLarge)
	}
	// Descriptor [dtype_name, shape, offset], SPEC §4.
	p.desc = wire.AppendArrayHeader(p.desc, 3)
	p.desc = wire.AppendString(p.desc, t.DType.String())
	p.desc = wire.AppendArrayHeader(p.desc, len(t.Shape))
	for _, d := range t.Shape {
		p.desc = wire.AppendInt(p.desc, int64(d))
	}
	p.desc = wire.AppendInt(p.desc, int64(offset))
	// The encoder copies the ext's data at once, so one scratch serves all.
	copy(p.ref[:], p.nonce[:])
	binary.LittleEndian.PutUint32(p.ref[nonceSize:], uint32(index))
	return wire.Ext{Code: refCode, Data: p.ref[:]}, nil
}

// newNonce draws the message's nonce. It only has to make a literal ext 42
// in the payload unlikely to match (SPEC §4); the runtime's per-thread
// ChaCha8 source is seeded from the OS and costs nanoseconds.
func (p *Prepared) newNonce() {
	binary.LittleEndian.PutUint64(p.nonce[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(p.nonce[8:], rand.Uint64())
}

// Tensors reports whether the payload is a tensor frame (kind 1) rather than
// plain msgpack (kind 0).
func (p *Prepared) Tensors() bool { return len(p.regions) > 0 }

// Size is the number of bytes Write writes.
func (p *Prepared) Size() int { return p.size }

// Write writes the payload to dst[:Size()]: the header, zero padding, and
// each tensor's bytes copied straight from its source to its 16-aligned
// offset. It fails if dst is short or a source tensor's data changed size
// since Prepare.
func (p *Prepared) Write(dst []byte) error {
	if len(dst) < p.size {
		return fmt.Errorf("frame: destination of %d bytes, need %d: %w", len(dst), p.size, io.ErrShortBuffer)
	}
	if len(p.regions) == 0 {
		copy(dst, p.tree)
		return nil
	}
	for i, r := range p.regions {
		if len(r.t.Data) != r.size {
			return fmt.Errorf("frame: tensor %d changed from %d to %d bytes since Prepare", i, r.size, len(r.t.Data))
		}
	}
	dst = dst[:p.size:p.size]
	binary.LittleEndian.PutUint32(dst, uint32(p.headerLen))
	// Appending within dst's capacity writes the header in place.
	h := append(dst[4:4], 0x93) // [descriptors, tree, nonce]
	h = wire.AppendArrayHeader(h, len(p.regions))
	h = append(h, p.desc...)
	h = wire.AppendBinHeader(h, len(p.tree))
	h = append(h, p.tree...)
	h = wire.AppendBinHeader(h, nonceSize)
	h = append(h, p.nonce[:]...)
	pos := 4 + len(h)
	start := align16(4 + p.headerLen)
	for _, r := range p.regions {
		at := start + r.offset
		clear(dst[pos:at])
		pos = at + copyCached(dst[at:], r.t.Data)
	}
	return nil
}

// Decode decodes a tensor frame into memory the receiver owns: nothing in
// the result aliases b (SPEC §3: no view of ring memory escapes). Tensors
// of a small frame (data ≤ 64 KiB, or a single tensor) share one allocation;
// otherwise each has its own, so keeping a small tensor does not keep a
// large one alive (SPEC §4). Plain payloads (kind 0) decode with
// wire.Unmarshal.
func Decode(b []byte) (any, error) { return decode(b, false, nil) }

// DecodeOwned is Decode for a buffer the caller hands over, such as a
// message it received from the network: where SPEC §4 lets the tensors
// share one allocation (data ≤ 64 KiB, or a single tensor) they share b
// itself instead of a copy of it, and large bins of the tree alias b as
// wire.UnmarshalOwned's do. b must not be changed or reused afterwards.
func DecodeOwned(b []byte) (any, error) { return decode(b, true, nil) }

// DecodeInto is Decode into receiver-supplied memory: each tensor's data
// is one Allocate of a, of exactly its size (zero-size tensors ask for
// nothing), and one copy from b; the rest of the value (shapes, the tree)
// is allocated as Decode does. Nothing in the result aliases b. The
// header and the tree are checked and every tensor's memory obtained
// before any byte is copied, so an error (a corrupt frame, an Allocate
// that fails, for instance an Arena too small) leaves the supplied memory
// untouched.
func DecodeInto(b []byte, a Allocator) (any, error) {
	if a == nil {
		return nil, errors.New("frame: decode into a nil allocator")
	}
	return decode(b, false, a)
}

func decode(b []byte, owned bool, a Allocator) (any, error) {
	header, data, err := split(b)
	if err != nil {
		return nil, corrupt("%w", err)
	}
	var small [8]descriptor
	var smallDims [16]int
	descs, dims, tree, nonce, err := readHeader(header, len(data), small[:0], smallDims[:0])
	if err != nil {
		return nil, corrupt("header: %w", err)
	}

	refs := newRefs(len(descs), len(dims))
	refs.noNonce = len(nonce) != nonceSize
	copy(refs.nonce[:], nonce)
	copy(refs.dims, dims) // out of the stack buffer: shapes outlive this call
	for i, d := range descs {
		t := &refs.tensors[i]
		t.DType = d.dtype
		t.Shape = refs.dims[d.dims : d.dims+d.rank : d.dims+d.rank]
	}
	// The tree first: its references point at the tensors, whose data is
	// filled in once everything is known to decode.
	v, err := (&wire.Decoder{Owned: owned, Ext: refs}).Decode(tree)
	if err != nil {
		return nil, fmt.Errorf("%w: tree: %w", ErrCorrupt, err)
	}
	if a != nil {
		if err := fillSupplied(refs.tensors, descs, data, a); err != nil {
			return nil, err
		}
		return v, nil
	}
	extent := 0
	for _, d := range descs {
		extent = max(extent, d.offset+d.size)
	}
	var storage []byte
	switch {
	case len(data) > ownerLimit && len(descs) != 1:
	case owned:
		storage = data[:extent:extent]
	default:
		storage = make([]byte, extent)
		copy(storage, data)
	}
	for i, d := range descs {
		t := &refs.tensors[i]
		switch {
		case d.size == 0:
			t.Data = []byte{}
		case storage != nil:
			t.Data = storage[d.offset : d.offset+d.size : d.offset+d.size]
		default:
			t.Data = make([]byte, d.size)
			copy(t.Data, data[d.offset:])
		}
	}
	return v, nil
}

// cachedChunk is the largest copy copyCached makes at once: below the
// 1 MiB from which Go's memmove (amd64) stores around the cache.
const cachedChunk = 512 << 10

// copyCached is copy through the cache at every size. From 1 MiB Go's
// memmove uses non-temporal stores, which pay off for a destination no one
// reads soon; here the destination is read next, by a receiver from ring
// memory a producer rewound to (ring's Put reuses the start of an empty
// buffer) or by a caller from the buffer it recycles.
func copyCached(dst, src []byte) int {
	n := 0
	for n < len(src) && n < len(dst) {
		n += copy(dst[n:], src[n:min(len(src), n+cachedChunk)])
	}
	return n
}

// fillSupplied gives each tensor its data in a's memory: all of it is
// allocated first, then copied, so a failing Allocate writes nothing.
func fillSupplied(tensors []tensor.Tensor, descs []descriptor, data []byte, a Allocator) error {
	for i, d := range descs {
		t := &tensors[i]
		if d.size == 0 {
			t.Data = []byte{}
			continue
		}
		var err error
		if t.Data, err = Allocate(a, d.size); err != nil {
			return fmt.Errorf("frame: tensor %d of %d bytes: %w", i, d.size, err)
		}
	}
	for i, d := range descs {
		copyCached(tensors[i].Data, data[d.offset:d.offset+d.size])
	}
	return nil
}

// refs are a decoded frame's tensors, which its tree refers to by index
// under its nonce (SPEC §4). The result keeps pointers into tensors, so
// what they share stays small: the tensor structs and their shapes, never
// their data.
type refs struct {
	nonce   [nonceSize]byte
	noNonce bool // the header's nonce is not 16 bytes: nothing refers
	tensors []tensor.Tensor
	dims    []int // every tensor's shape, one after the other
}

// oneRef, twoRefs and fewRefs are refs for the usual frames, each in one
// allocation: less garbage per message. One tensor is the commonest; two
// are a stream chunk's (its payload tensor and the 0-d finished mark),
// which in fewRefs' 384 B size class would cost 160 B more per chunk.
type oneRef struct {
	refs
	tensors [1]tensor.Tensor
	dims    [4]int
}

type twoRefs struct {
	refs
	tensors [2]tensor.Tensor
	dims    [4]int
}

type fewRefs struct {
	refs
	tensors [4]tensor.Tensor
	dims    [8]int
}

func newRefs(tensors, dims int) *refs {
	switch {
	case tensors <= len(oneRef{}.tensors) && dims <= len(oneRef{}.dims):
		o := new(oneRef)
		o.refs.tensors, o.refs.dims = o.tensors[:tensors], o.dims[:dims]
		return &o.refs
	case tensors <= len(twoRefs{}.tensors) && dims <= len(twoRefs{}.dims):
		o := new(twoRefs)
		o.refs.tensors, o.refs.dims = o.tensors[:tensors], o.dims[:dims]
		return &o.refs
	case tensors <= len(fewRefs{}.tensors) && dims <= len(fewRefs{}.dims):
		f := new(fewRefs)
		f.refs.tensors, f.refs.dims = f.tensors[:tensors], f.dims[:dims]
		return &f.refs
	}
	return &refs{tensors: make([]tensor.Tensor, tensors), dims: make([]int, dims)}
}

// DecodeExt turns a reference with this message's nonce into its tensor;
// any other ext is a literal (SPEC §4).
func (r *refs) DecodeExt(e wire.Ext) (any, bool, error) {
	if r.noNonce || e.Code != refCode || len(e.Data) != refSize || [nonceSize]byte(e.Data) != r.nonce {
		return nil, false, nil
	}
	index := binary.LittleEndian.Uint32(e.Data[nonceSize:])
	if uint64(index) >= uint64(len(r.tensors)) {
		return nil, false, corrupt("reference to tensor %d of %d", index, len(r.tensors))
	}
	return &r.tensors[index], true, nil
}

// Detect reports whether b is a tensor frame (payload kind 1) rather than
// plain msgpack (kind 0), for bytes that come without their kind (a file;
// in the ring, a frame's kind byte says it, SPEC §3). It checks what Decode
// checks of the header (the u32 LE header length; [descriptors, tree,
// nonce] with every tensor inside the data area) and that the nonce has 16
// bytes; not the tree. Plain msgpack practically never passes: its first
// four bytes, read as a length, would have to end exactly at the end of
// such a header. Detect reads only within b and keeps no reference to it.
func Detect(b []byte) bool {
	header, data, err := split(b)
	if err != nil {
		return false
	}
	var small [8]descriptor
	var smallDims [16]int
	_, _, _, nonce, err := readHeader(header, len(data), small[:0], smallDims[:0])
	return err == nil && len(nonce) == nonceSize
}

// Marshal returns v's payload bytes in memory of their own: a tensor frame
// if v holds tensors, else its plain msgpack form (SPEC §4), which Detect
// tells apart. It is Prepare without a limit and Write, for a caller with no
// shared memory to write into.
func Marshal(v any) ([]byte, error) {
	p, err := Prepare(v, 0)
	if err != nil {
		return nil, err
	}
	defer p.Release()
	b := make([]byte, p.Size())
	if err := p.Write(b); err != nil {
		return nil, err
	}
	return b, nil
}

// split cuts a frame into its header and its data area, checking the u32
// LE header length against b (SPEC §4).
func split(b []byte) (header, data []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%d bytes, no header length", len(b))
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if n > uint64(len(b)-4) || align16(4+int(n)) > len(b) {
		return nil, nil, fmt.Errorf("header of %d bytes in a %d-byte payload", n, len(b))
	}
	return b[4 : 4+n], b[align16(4+int(n)):], nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}
