package wire

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"omnishm/tensor"
)

// Encoder writes payload trees in the msgpack form. Its zero value encodes
// exactly like Marshal; the hooks exist for the tensor frame codec (SPEC §4),
// which shares this walker.
//
// Accepted values: nil, bool, every int and uint kind, float32 and float64
// (both written as float64, as Python floats are), string, []byte and byte
// arrays (bin), *tensor.Tensor / tensor.Tensor, *tensor.Array, *tensor.Image,
// Ext, Map (in its order), []any and other slices and arrays, map[string]any
// and other maps (keys sorted, so the output is deterministic), pointers and
// interfaces (nil is nil), and structs as maps of their exported fields in
// field order, named and filtered by `msgpack:"name,omitempty"` tags
// (`msgpack:"-"` skips a field). A nil slice, map or pointer is nil, as in
// encoding/json. Anything else is ErrUnsupported.
//
// A slice or array whose elements are of a tensor dtype (bool, int8 to
// int64, uint16 to uint64, float32, float64, complex64, complex128,
// tensor.Half, tensor.BHalf, and named types of those kinds) is the 1-D
// tensor it is: a Python peer gets a torch.Tensor of that dtype, a Go peer
// a *tensor.Tensor, which Decode turns back into the slice. (As a msgpack
// list a []float32 would arrive as Python floats, float64.) In a tensor
// frame its bytes go the frame's raw path (SPEC §4). To send a Python
// list, send []any; []int, []uint and []string are lists too, int and uint
// having no dtype of their size on every host.
type Encoder struct {
	// Tensor, if set, replaces each tensor by the extension it returns,
	// instead of the tensor's marker map.
	Tensor func(*tensor.Tensor) (Ext, error)
	// CheckLeaf, if set, is called with the data size of each array and
	// image before it is encoded; an error stops the encoding.
	CheckLeaf func(nbytes int) error
}

// encodeState is one encoding's scratch: a stack of map keys being sorted.
type encodeState struct {
	Encoder  // a copy, so the caller's Encoder does not escape
	keys     []string
	keyStack *[]string // where keys came from, when taken (done)
	depth    int
	cuts     *Pieces // MarshalPieces: where leaf data is left out
}

// keyStacks holds the key stacks of finished encodings: only a map of
// more than smallMap entries needs one, so an encoding takes one when it
// meets such a map, and its state otherwise lives on the stack.
var keyStacks = sync.Pool{New: func() any { return new([]string) }}

// Append appends the msgpack form of v to dst.
func (e *Encoder) Append(dst []byte, v any) ([]byte, error) {
	s := encodeState{Encoder: *e}
	b, err := s.encode(dst, v)
	s.done()
	return b, err
}

// done hands back the key stack the encoding took, if any.
func (s *encodeState) done() {
	if s.keyStack != nil {
		clear(s.keys[:cap(s.keys)]) // a pooled stack keeps no caller's keys alive
		*s.keyStack = s.keys[:0]
		keyStacks.Put(s.keyStack)
	}
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
}

func (s *encodeState) encode(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return appendNil(b), nil
	case bool:
		return appendBool(b, x), nil
	case int, int8, int16, int32, int64:
		// One case per signedness: reflect reads any width without allocating.
		return AppendInt(b, reflect.ValueOf(x).Int()), nil
	case uint, uint8, uint16, uint32, uint64:
		return appendUint(b, reflect.ValueOf(x).Uint()), nil
	case float32:
		return appendFloat(b, float64(x)), nil
	case float64:
		return appendFloat(b, x), nil
	case string:
		return AppendString(b, x), nil
	case []byte:
		if x == nil {
			return appendNil(b), nil
		}
		return appendBin(b, x), nil
	case Ext:
		return appendExt(b, x.Code, x.Data), nil
	case *Ext: // not by reflection: its value form would come back here
		if x == nil {
			return appendNil(b), nil
		}
		return appendExt(b, x.Code, x.Data), nil
	case *tensor.Tensor:
		if x == nil {
			return appendNil(b), nil
		}
		return s.tensor(b, x)
	case tensor.Tensor:
		return s.tensor(b, &x)
	case *tensor.Array:
		if x == nil {
			return appendNil(b), nil
		}
		return s.array(b, x)
	case *tensor.Image:
		if x == nil {
			return appendNil(b), nil
		}
		return s.image(b, x)
	case []any:
		if x == nil {
			return appendNil(b), nil
		}
		return s.list(b, x)
	case map[string]any:
		if x == nil {
			return appendNil(b), nil
		}
		return s.stringMap(b, x)
	case Map:
		if x == nil {
			return appendNil(b), nil
		}
		return s.orderedMap(b, x)
	case []int64:
		return numericSlice(s, b, x)
	case []int:
		return appendList(b, x, func(b []byte, n int) []byte { return AppendInt(b, int64(n)) }), nil
	case []float32:
		return numericSlice(s, b, x)
	case []float64:
		return numericSlice(s, b, x)
	case []string:
		return appendList(b, x, AppendString), nil
	}
	return s.value(b, reflect.ValueOf(v))
}

func (s *encodeState) enter() error {
	s.depth++
	if s.depth > maxDepth {
		return unsupported("nesting deeper than %d (a cycle?)", maxDepth)
	}
	return nil
}

func (s *encodeState) list(b []byte, x []any) ([]byte, error) {
	if err := s.enter(); err != nil {
		return b, err
	}
	b = AppendArrayHeader(b, len(x))
	var err error
	for _, v := range x {
		if b, err = s.encode(b, v); err != nil {
			return b, err
		}
	}
	s.depth--
	return b, nil
}

func (s *encodeState) stringMap(b []byte, m map[string]any) ([]byte, error) {
	if err := s.enter(); err != nil {
		return b, err
	}
	if len(m) <= smallMap {
		return s.smallStringMap(b, m)
	}
	// Keys go on a shared stack so nested maps reuse one allocation.
	if s.keyStack == nil {
		s.keyStack = keyStacks.Get().(*[]string)
		s.keys = *s.keyStack
	}
	base := len(s.keys)
	for k := range m {
		s.keys = append(s.keys, k)
	}
	slices.Sort(s.keys[base:])
	b = appendMapHeader(b, len(m))
	var err error
	for i := base; i < base+len(m); i++ {
		k := s.keys[i]
		b = AppendString(b, k)
		if b, err = s.encode(b, m[k]); err != nil {
			return b, err
		}
	}
	s.keys = s.keys[:base]
	s.depth--
	return b, nil
}

// smallMap is the size up to which stringMap sorts a map's entries on the
// stack: one pass over the map, no second lookup per key.
const smallMap = 8

// oneKeys holds, per depth, the key of the last one-entry map encoded
// there. A one-entry map is looked up under it before it is iterated: an
// iteration's random start alone costs more than the look-up, and a
// producer of same-shaped payloads ({"data": tensor}, {"audio": codes})
// repeats the key. A wrong guess costs one look-up.
var oneKeys [8]atomic.Pointer[string]

// oneEntry writes the one-entry map {k: v}; s.enter was called.
func (s *encodeState) oneEntry(b []byte, k string, v any) ([]byte, error) {
	b = AppendString(appendMapHeader(b, 1), k)
	b, err := s.encode(b, v)
	if err != nil {
		return b, err
	}
	s.depth--
	return b, nil
}

// smallStringMap is stringMap for a map of at most smallMap entries; s.enter
// was called.
func (s *encodeState) smallStringMap(b []byte, m map[string]any) ([]byte, error) {
	if len(m) == 1 && s.depth <= len(oneKeys) {
		guess := &oneKeys[s.depth-1]
		if k := guess.Load(); k != nil {
			if v, ok := m[*k]; ok {
				return s.oneEntry(b, *k, v)
			}
		}
		for k, v := range m {
			guess.Store(interned(k))
			return s.oneEntry(b, k, v)
		}
	}
	var entries [smallMap]struct {
		k string
		v any
	}
	n := 0
	for k, v := range m {
		// Insertion sort: a handful of keys.
		i := n
		for ; i > 0 && entries[i-1].k > k; i-- {
			entries[i] = entries[i-1]
		}
		entries[i].k, entries[i].v = k, v
		if n++; n == len(m) {
			break // the iterator's last step would only scan the empty slots
		}
	}
	b = appendMapHeader(b, n)
	var err error
	for _, e := range entries[:n] {
		b = AppendString(b, e.k)
		if b, err = s.encode(b, e.v); err != nil {
			return b, err
		}
	}
	s.depth--
	return b, nil
}

func (s *encodeState) orderedMap(b []byte, m Map) ([]byte, error) {
	if err := s.enter(); err != nil {
		return b, err
	}
	b = appendMapHeader(b, len(m))
	var err error
	for _, kv := range m {
		if b, err = s.encode(b, kv.Key); err != nil {
			return b, err
		}
		if b, err = s.encode(b, kv.Value); err != nil {
			return b, err
		}
	}
	s.depth--
	return b, nil
}

// tensor writes {"__tensor__": true, "dtype", "shape", "data"} (SPEC §5), or
// the hook's extension in a tensor frame (SPEC §4).
func (s *encodeState) tensor(b []byte, t *tensor.Tensor) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return b, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	if s.Tensor != nil {
		ext, err := s.Tensor(t)
		if err != nil {
			return b, err
		}
		return appendExt(b, ext.Code, ext.Data), nil
	}
	return s.appendLeaf(b, tensorMarker, "dtype", t.DType.String(), t.Shape, t.Data), nil
}

// appendLeaf writes a marker map {marker: true, nameKey: name, "shape",
// "data"} in the order OmniSerializer writes it (SPEC §5).
// Under MarshalPieces, large data is left out and noted instead.
func (s *encodeState) appendLeaf(b []byte, marker, nameKey, name string, shape []int, data []byte) []byte {
	b = appendMapHeader(b, 4)
	b = appendBool(AppendString(b, marker), true)
	b = AppendString(AppendString(b, nameKey), name)
	b = appendShape(AppendString(b, "shape"), shape)
	if s.cuts != nil && len(data) >= s.cuts.min {
		b = AppendBinHeader(AppendString(b, "data"), len(data))
		s.cuts.cuts = append(s.cuts.cuts, cut{at: len(b), data: data})
		return b
	}
	return appendBin(AppendString(b, "data"), data)
}

func (s *encodeState) checkLeaf(n int) error {
	if s.CheckLeaf != nil {
		return s.CheckLeaf(n)
	}
	return nil
}

func (s *encodeState) array(b []byte, a *tensor.Array) ([]byte, error) {
	return s.plainLeaf(b, a.Validate(), arrayMarker, "dtype", a.DType, a.Shape, a.Data)
}

func (s *encodeState) image(b []byte, m *tensor.Image) ([]byte, error) {
	return s.plainLeaf(b, m.Validate(), imageMarker, "mode", m.Mode, m.Shape, m.Data)
}

// plainLeaf writes an array or image leaf (no hook replaces those): first
// CheckLeaf's verdict on its size, then invalid (its Validate), then
// appendLeaf.
func (s *encodeState) plainLeaf(b []byte, invalid error, marker, nameKey, name string, shape []int, data []byte) ([]byte, error) {
	if err := s.checkLeaf(len(data)); err != nil {
		return b, err
	}
	if invalid != nil {
		return b, fmt.Errorf("%w: %w", ErrUnsupported, invalid)
	}
	return s.appendLeaf(b, marker, nameKey, name, shape, data), nil
}

func appendShape(b []byte, shape []int) []byte {
	b = AppendArrayHeader(b, len(shape))
	for _, d := range shape {
		b = AppendInt(b, int64(d))
	}
	return b
}

var (
	typeTensor = reflect.TypeFor[tensor.Tensor]()
	typeArray  = reflect.TypeFor[tensor.Array]()
	typeImage  = reflect.TypeFor[tensor.Image]()
	typeExt    = reflect.TypeFor[Ext]()

	typeStringMap = reflect.TypeFor[map[string]any]()
)

// value encodes what the type switch did not recognise, by kind.
func (s *encodeState) value(b []byte, v reflect.Value) ([]byte, error) {
	if !v.IsValid() {
		return appendNil(b), nil
	}
	switch t := v.Type(); t {
	case typeTensor, typeArray, typeImage, typeExt:
		if v.CanAddr() {
			return s.encode(b, v.Addr().Interface())
		}
		if v.CanInterface() {
			return s.encode(b, v.Interface())
		}
	}
	switch v.Kind() {
	case reflect.Bool:
		return appendBool(b, v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return AppendInt(b, v.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return appendUint(b, v.Uint()), nil
	case reflect.Float32, reflect.Float64:
		return appendFloat(b, v.Float()), nil
	case reflect.String:
		return AppendString(b, v.String()), nil
	case reflect.Interface:
		if v.IsNil() {
			return appendNil(b), nil
		}
		if v.CanInterface() {
			return s.encode(b, v.Interface()) // already boxed: back to the fast paths
		}
		return s.value(b, v.Elem())
	case reflect.Pointer:
		if v.IsNil() {
			return appendNil(b), nil
		}
		// Pointers count towards the depth: a pointer cycle must end.
		if err := s.enter(); err != nil {
			return b, err
		}
		b, err := s.value(b, v.Elem())
		s.depth--
		return b, err
	case reflect.Slice:
		if v.IsNil() {
			return appendNil(b), nil
		}
		fallthrough
	case reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return appendBin(b, byteSlice(v)), nil
		}
		if t, ok := SliceTensor(v); ok {
			return s.tensor(b, t)
		}
		if err := s.enter(); err != nil {
			return b, err
		}
		n := v.Len()
		b = AppendArrayHeader(b, n)
		var err error
		for i := range n {
			if b, err = s.value(b, v.Index(i)); err != nil {
				return b, err
			}
		}
		s.depth--
		return b, nil
	case reflect.Map:
		if v.IsNil() {
			return appendNil(b), nil
		}
		if v.CanInterface() && v.Type() == typeStringMap {
			return s.stringMap(b, v.Interface().(map[string]any))
		}
		return s.reflectMap(b, v)
	case reflect.Struct:
		return s.structValue(b, v)
	}
	return b, unsupported("%s", v.Type())
}

// numericSlice writes a slice of a tensor dtype's elements as the 1-D
// tensor it is (see Encoder): in a tensor frame its bytes take the frame's
// raw path, and no element changes type on the way.
func numericSlice[T tensor.Element](s *encodeState, b []byte, x []T) ([]byte, error) {
	if x == nil {
		return appendNil(b), nil
	}
	t, err := tensor.FromSlice(x)
	if err != nil {
		return b, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return s.tensor(b, t)
}

// appendList writes x as a msgpack array, each element by appendElem (nil
// as nil).
func appendList[T any](b []byte, x []T, appendElem func([]byte, T) []byte) []byte {
	if x == nil {
		return appendNil(b)
	}
	b = AppendArrayHeader(b, len(x))
	for _, v := range x {
		b = appendElem(b, v)
	}
	return b
}

// SliceTensor returns the 1-D tensor that v, a slice or array whose
// elements are of a tensor dtype, travels as (see Encoder), over v's memory
// (over a copy, for an array that is not addressable): v must not change
// while the tensor is in use. ok is false for any other value, among them
// byte slices and arrays (bin) and nil slices (nil). Encoder, and jsonform
// printing a Go value as what it travels as, both ask it.
func SliceTensor(v reflect.Value) (t *tensor.Tensor, ok bool) {
	if k := v.Kind(); k != reflect.Slice && k != reflect.Array || k == reflect.Slice && v.IsNil() {
		return nil, false
	}
	dt, ok := tensor.DTypeOfType(v.Type().Elem())
	if !ok || dt == tensor.Uint8 {
		return nil, false
	}
	n := v.Len()
	t = &tensor.Tensor{DType: dt, Shape: []int{n}, Data: []byte{}}
	if n == 0 {
		return t, true
	}
	if !v.Index(0).CanAddr() {
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		v = c
	}
	t.Data = unsafe.Slice((*byte)(v.Index(0).Addr().UnsafePointer()), n*dt.ItemSize())
	return t, true
}

func byteSlice(v reflect.Value) []byte {
	if v.Kind() == reflect.Slice {
		return v.Bytes()
	}
	if v.CanAddr() {
		return v.Slice(0, v.Len()).Bytes()
	}
	out := make([]byte, v.Len())
	reflect.Copy(reflect.ValueOf(out), v)
	return out
}

// reflectMap sorts entries by their encoded keys, which for string keys is
// the same order as sorting the strings.
func (s *encodeState) reflectMap(b []byte, v reflect.Value) ([]byte, error) {
	if err := s.enter(); err != nil {
		return b, err
	}
	type entry struct {
		key   []byte
		value reflect.Value
	}
	entries := make([]entry, 0, v.Len())
	for it := v.MapRange(); it.Next(); {
		k, err := s.value(nil, it.Key())
		if err != nil {
			return b, err
		}
		entries = append(entries, entry{k, it.Value()})
	}
	slices.SortFunc(entries, func(x, y entry) int { return bytes.Compare(x.key, y.key) })
	b = appendMapHeader(b, len(entries))
	var err error
	for _, e := range entries {
		b = append(b, e.key...)
		if b, err = s.value(b, e.value); err != nil {
			return b, err
		}
	}
	s.depth--
	return b, nil
}

type field struct {
	index     int
	name      string
	omitEmpty bool
}

var structFields sync.Map // reflect.Type -> []field

func fieldsOf(t reflect.Type) []field {
	if f, ok := structFields.Load(t); ok {
		return f.([]field)
	}
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("msgpack")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		fs = append(fs, field{index: i, name: name, omitEmpty: slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	structFields.Store(t, fs)
	return fs
}

// isEmpty is omitempty's test: like msgspec's omitted defaults, an empty
// string, list or map counts as unset, as does a zero number or a nil pointer.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map:
		return v.Len() == 0
	}
	return v.IsZero()
}

func (s *encodeState) structValue(b []byte, v reflect.Value) ([]byte, error) {
	if err := s.enter(); err != nil {
		return b, err
	}
	fs := fieldsOf(v.Type())
	n := 0
	for _, f := range fs {
		if !f.omitEmpty || !isEmpty(v.Field(f.index)) {
			n++
		}
	}
	b = appendMapHeader(b, n)
	var err error
	for _, f := range fs {
		fv := v.Field(f.index)
		if f.omitEmpty && isEmpty(fv) {
			continue
		}
		b = AppendString(b, f.name)
		if b, err = s.value(b, fv); err != nil {
			return b, err
		}
	}
	s.depth--
	return b, nil
}
