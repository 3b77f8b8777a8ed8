package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"omnishm/tensor"
)

// ErrMismatch is wrapped by Decode's errors for a payload that does not fit
// the Go value: the error names the path of the mismatch, as in
// "wire: mismatch at .codes.audio: want int64 tensor, got float32 tensor".
var ErrMismatch = errors.New("wire: mismatch")

// Decode stores a decoded payload tree (what Unmarshal, frame.Decode and a
// connector's Get and Recv return: map[string]any, map[any]any, Map, []any,
// bool, int64, uint64, float64, string, []byte, Ext, *tensor.Tensor,
// *tensor.Array, *tensor.Image) into the value v points to, by reflection.
//
//   - Structs are read from maps, fields named as Encoder names them: the
//     name of a `msgpack:"name"` tag (omitempty means nothing here), else
//     the Go name; `msgpack:"-"` and unexported fields are skipped. Keys
//     with no field are ignored; a field with no key keeps its value, so
//     decode into a fresh value, or set defaults first.
//   - Maps (map[string]T, map[int]T, ...) take each key and value as a
//     value of their type: a Python dict with int keys, which arrives as
//     map[any]any, decodes into map[int]string. Entries are added to a
//     map that is not nil.
//   - Integers must fit their type, and floats (float32 included) their
//     range: an int8 field refuses 300, never wraps. An integer decodes
//     into a float only when it converts exactly; a float never decodes
//     into an integer. A float64 rounds to the nearest float32, Half or
//     BHalf.
//   - Slices and arrays of a tensor dtype's elements ([]float32, []int64,
//     [4]bool, []tensor.Half, named element types) decode from a tensor of
//     exactly that dtype and any shape (its elements in C order; decode
//     into a *tensor.Tensor to check the shape), from a numpy array of that
//     dtype ("<f4" for float32), or from a list, element by element.
//     []byte also decodes from bin. Other slices decode from lists; an
//     array needs exactly its length.
//   - *tensor.Tensor, *tensor.Array and *tensor.Image (and their values)
//     take those leaves; a 0-d tensor also decodes into a bool or a
//     number, under the rules above (a bool finish mark into a bool).
//   - Pointers are allocated as needed; nil decodes into a nil pointer,
//     slice, map or interface, and an interface takes the payload value as
//     it is. nil is a mismatch for any other type.
//
// Errors wrap ErrMismatch and name the path of the mismatch; v may be
// partly filled. A v that is not a non-nil pointer, or a type with no
// payload form (chan, func), is ErrUnsupported.
//
// Ownership: tensors, arrays, images, []byte and other values taken as
// they are share memory with payload, which is the caller's already (a
// received payload aliases no shared memory); numeric slices decoded from
// tensors are copies.
func Decode(payload, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("%w: Decode into %T, not a non-nil pointer", ErrUnsupported, v)
	}
	var d decodeInto
	d.path = d.pathBuf[:0]
	return d.value(payload, rv.Elem())
}

// decodeInto is one Decode's state: the path to the value being decoded,
// for error messages.
type decodeInto struct {
	path []step
	hops int // pointers followed: a type like `type P *P` must end too

	pathBuf [8]step
}

// step is one element of a path: ".name", or "[index]" when name is "".
type step struct {
	name  string
	index int
}

func (d *decodeInto) push(s step) { d.path = append(d.path, s) }
func (d *decodeInto) pop()        { d.path = d.path[:len(d.path)-1] }

func (d *decodeInto) where() string {
	if len(d.path) == 0 {
		return "."
	}
	var b strings.Builder
	for _, s := range d.path {
		if s.name != "" {
			b.WriteString(".")
			b.WriteString(s.name)
			continue
		}
		b.WriteString("[")
		b.WriteString(strconv.Itoa(s.index))
		b.WriteString("]")
	}
	return b.String()
}

func (d *decodeInto) mismatch(want string, got any) error {
	return fmt.Errorf("%w at %s: want %s, got %s", ErrMismatch, d.where(), want, describe(got))
}

func (d *decodeInto) outOfRange(t reflect.Type, got any) error {
	return fmt.Errorf("%w at %s: want %s, got %s %v (out of range)", ErrMismatch, d.where(), t, describe(got), got)
}

// describe names a payload value's type as a mismatch reports it.
func describe(p any) string {
	switch x := p.(type) {
	case nil:
		return "nil"
	case []byte:
		return "bytes"
	case []any:
		return "list"
	case map[string]any, map[any]any, Map:
		return "map"
	case Ext:
		return "ext"
	case *tensor.Tensor:
		return x.DType.String() + " tensor"
	case *tensor.Array:
		return "ndarray " + x.DType
	case *tensor.Image:
		return "image " + x.Mode
	}
	return fmt.Sprintf("%T", p)
}

var (
	typeHalf      = reflect.TypeFor[tensor.Half]()
	typeBHalf     = reflect.TypeFor[tensor.BHalf]()
	typeMap       = reflect.TypeFor[Map]()
	typeTensorPtr = reflect.PointerTo(typeTensor)
	typeArrayPtr  = reflect.PointerTo(typeArray)
	typeImagePtr  = reflect.PointerTo(typeImage)
)

// value decodes p into v, which is settable.
func (d *decodeInto) value(p any, v reflect.Value) error {
	t := v.Type()
	if p != nil && reflect.TypeOf(p) == t {
		v.Set(reflect.ValueOf(p)) // the common case: a tree's own types
		return nil
	}
	if len(d.path)+d.hops > maxDepth {
		return fmt.Errorf("%w: nesting deeper than %d (a cycle?)", ErrUnsupported, maxDepth)
	}
	if x, ok := p.(*tensor.Tensor); ok && len(x.Shape) == 0 && isScalarKind(t.Kind()) {
		s, ok := tensorScalar(x)
		if !ok {
			return d.mismatch(t.String(), p)
		}
		p = s
	}
	switch t {
	case typeTensorPtr, typeArrayPtr, typeImagePtr, typeMap:
		if p == nil {
			v.SetZero()
			return nil
		}
		return d.mismatch(leafName(t), p)
	case typeTensor, typeArray, typeImage, typeExt:
		if pv := reflect.ValueOf(p); pv.Kind() == reflect.Pointer && pv.Type().Elem() == t && !pv.IsNil() {
			v.Set(pv.Elem())
			return nil
		}
		return d.mismatch(leafName(t), p)
	case typeHalf, typeBHalf:
		f, ok := toFloat(p)
		if !ok {
			return d.mismatch(t.String(), p)
		}
		if t == typeHalf {
			v.SetUint(uint64(tensor.HalfFrom(float32(f))))
		} else {
			v.SetUint(uint64(tensor.BHalfFrom(float32(f))))
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Interface:
		if p == nil {
			v.SetZero()
			return nil
		}
		if pv := reflect.ValueOf(p); pv.Type().Implements(t) {
			v.Set(pv)
			return nil
		}
		return d.mismatch(t.String(), p)
	case reflect.Pointer:
		if p == nil {
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.hops++
		err := d.value(p, v.Elem())
		d.hops--
		return err
	case reflect.Bool, reflect.String:
		// The tree's bool and string; a named type of those kinds converts.
		pv := reflect.ValueOf(p)
		if p == nil || pv.Kind() != t.Kind() {
			return d.mismatch(t.String(), p)
		}
		v.Set(pv.Convert(t))
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return d.integer(p, v)
	case reflect.Float32, reflect.Float64:
		f, ok := toFloat(p)
		if !ok {
			return d.mismatch(t.String(), p)
		}
		if v.OverflowFloat(f) {
			return d.outOfRange(t, p)
		}
		v.SetFloat(f)
		return nil
	case reflect.Slice, reflect.Array:
		return d.list(p, v)
	case reflect.Map:
		return d.mapValue(p, v)
	case reflect.Struct:
		return d.structValue(p, v)
	}
	return fmt.Errorf("%w: Decode into %s at %s", ErrUnsupported, t, d.where())
}

// integer decodes the tree's int64 or uint64 into an integer v that holds
// it exactly.
func (d *decodeInto) integer(p any, v reflect.Value) error {
	fits := false
	switch x := p.(type) {
	case int64:
		if v.CanInt() {
			if fits = !v.OverflowInt(x); fits {
				v.SetInt(x)
			}
		} else if fits = x >= 0 && !v.OverflowUint(uint64(x)); fits {
			v.SetUint(uint64(x))
		}
	case uint64: // above MaxInt64
		if fits = v.CanUint() && !v.OverflowUint(x); fits {
			v.SetUint(x)
		}
	default:
		return d.mismatch(v.Type().String(), p)
	}
	if !fits {
		return d.outOfRange(v.Type(), p)
	}
	return nil
}

func leafName(t reflect.Type) string {
	switch t {
	case typeTensor, typeTensorPtr:
		return "tensor"
	case typeArray, typeArrayPtr:
		return "ndarray"
	case typeImage, typeImagePtr:
		return "image"
	case typeMap:
		return "wire.Map (Decoder.Ordered)"
	}
	return "ext"
}

// toFloat reads a float, or an integer that a float64 holds exactly.
func toFloat(p any) (float64, bool) {
	switch x := p.(type) {
	case float64:
		return x, true
	case int64:
		f := float64(x)
		return f, f >= -(1<<63) && f < 1<<63 && int64(f) == x
	case uint64:
		f := float64(x)
		return f, f < 1<<64 && uint64(f) == x
	}
	return 0, false
}

func isScalarKind(k reflect.Kind) bool {
	return k >= reflect.Bool && k <= reflect.Float64
}

// tensorScalar reads the element of a valid 0-d tensor as the tree's type
// of its kind: bool, int64, uint64 or float64.
func tensorScalar(t *tensor.Tensor) (any, bool) {
	if t.Validate() != nil {
		return nil, false
	}
	b := t.Data
	switch t.DType {
	case tensor.Bool:
		if b[0] > 1 {
			return nil, false
		}
		return b[0] == 1, true
	case tensor.Uint8:
		return int64(b[0]), true
	case tensor.Int8:
		return int64(int8(b[0])), true
	case tensor.Int16:
		return int64(int16(binary.LittleEndian.Uint16(b))), true
	case tensor.Int32:
		return int64(int32(binary.LittleEndian.Uint32(b))), true
	case tensor.Int64:
		return int64(binary.LittleEndian.Uint64(b)), true
	case tensor.Uint16:
		return int64(binary.LittleEndian.Uint16(b)), true
	case tensor.Uint32:
		return int64(binary.LittleEndian.Uint32(b)), true
	case tensor.Uint64:
		if u := binary.LittleEndian.Uint64(b); u > math.MaxInt64 {
			return u, true
		}
		return int64(binary.LittleEndian.Uint64(b)), true
	case tensor.Float16:
		return float64(tensor.Half(binary.LittleEndian.Uint16(b)).Float32()), true
	case tensor.BFloat16:
		return float64(tensor.BHalf(binary.LittleEndian.Uint16(b)).Float32()), true
	case tensor.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), true
	case tensor.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), true
	}
	return nil, false // complex: no scalar kind
}

// list decodes p into a slice or array v.
func (d *decodeInto) list(p any, v reflect.Value) error {
	t := v.Type()
	if p == nil && t.Kind() == reflect.Slice {
		v.SetZero()
		return nil
	}
	dt, numeric := tensor.DTypeOfType(t.Elem())
	switch x := p.(type) {
	case []byte:
		if dt != tensor.Uint8 {
			break
		}
		if t.Kind() == reflect.Slice {
			v.SetBytes(x)
			return nil
		}
		return d.copyElements(v, dt, len(x), x, p)
	case *tensor.Tensor:
		if !numeric {
			break
		}
		if x.DType != dt {
			return d.mismatch(dt.String()+" tensor", p)
		}
		if err := x.Validate(); err != nil {
			return fmt.Errorf("%w at %s: %w", ErrMismatch, d.where(), err)
		}
		return d.copyElements(v, dt, x.Len(), x.Data, p)
	case *tensor.Array:
		if !numeric {
			break
		}
		if !numpyIs(x.DType, dt) {
			return d.mismatch(dt.String()+" ndarray", p)
		}
		if err := x.Validate(); err != nil {
			return fmt.Errorf("%w at %s: %w", ErrMismatch, d.where(), err)
		}
		return d.copyElements(v, dt, len(x.Data)/dt.ItemSize(), x.Data, p)
	case []any:
		if t.Kind() == reflect.Slice {
			v.Set(reflect.MakeSlice(t, len(x), len(x)))
		} else if len(x) != v.Len() {
			return d.lengthMismatch(t, len(x), p)
		}
		for i, e := range x {
			d.push(step{index: i})
			if err := d.value(e, v.Index(i)); err != nil {
				return err
			}
			d.pop()
		}
		return nil
	}
	switch {
	case numeric:
		return d.mismatch(dt.String()+" tensor or list", p)
	case t.Kind() == reflect.Array:
		return d.mismatch(fmt.Sprintf("list of %d", t.Len()), p)
	}
	return d.mismatch("list", p)
}

func (d *decodeInto) lengthMismatch(t reflect.Type, n int, p any) error {
	return fmt.Errorf("%w at %s: want %s, got %s of %d", ErrMismatch, d.where(), t, describe(p), n)
}

// copyElements copies n elements of dtype dt, data in the wire's (and the
// host's) little-endian order, into v: a new slice, or an array of n.
func (d *decodeInto) copyElements(v reflect.Value, dt tensor.DType, n int, data []byte, p any) error {
	if dt == tensor.Bool {
		// A Go bool must hold 0 or 1 (see tensor.Values).
		for i, c := range data {
			if c > 1 {
				d.push(step{index: i})
				return fmt.Errorf("%w at %s: bool element is %#x, not 0 or 1", ErrMismatch, d.where(), c)
			}
		}
	}
	if v.Kind() == reflect.Slice {
		v.Set(reflect.MakeSlice(v.Type(), n, n))
	} else if n != v.Len() {
		return d.lengthMismatch(v.Type(), n, p)
	}
	if n > 0 {
		copy(unsafe.Slice((*byte)(v.Index(0).Addr().UnsafePointer()), n*dt.ItemSize()), data)
	}
	return nil
}

// numpyIs reports whether the numpy dtype string s ("<f4", "|b1") has the
// elements of dt in little-endian order.
func numpyIs(s string, dt tensor.DType) bool {
	if len(s) < 3 || (s[0] != '<' && s[0] != '|' && s[0] != '=') {
		return false // '>' is big-endian; '=' is the sender's order, little on every host here
	}
	var kind byte
	switch dt {
	case tensor.Bool:
		kind = 'b'
	case tensor.Int8, tensor.Int16, tensor.Int32, tensor.Int64:
		kind = 'i'
	case tensor.Uint8, tensor.Uint16, tensor.Uint32, tensor.Uint64:
		kind = 'u'
	case tensor.Float16, tensor.Float32, tensor.Float64:
		kind = 'f'
	case tensor.Complex64, tensor.Complex128:
		kind = 'c'
	default:
		return false // bfloat16: numpy has none
	}
	return s[1] == kind && s[2:] == strconv.Itoa(dt.ItemSize())
}

// entries calls f with each entry of a decoded map, in wire order for a
// Map; ok is false if p is not a map.
func entries(p any, f func(k, v any) error) (ok bool, err error) {
	switch m := p.(type) {
	case map[string]any:
		for k, v := range m {
			if err := f(k, v); err != nil {
				return true, err
			}
		}
	case map[any]any:
		for k, v := range m {
			if err := f(k, v); err != nil {
				return true, err
			}
		}
	case Map:
		for _, kv := range m {
			if err := f(kv.Key, kv.Value); err != nil {
				return true, err
			}
		}
	default:
		return false, nil
	}
	return true, nil
}

// keyStep is the path step of a map entry.
func keyStep(k any) step {
	if s, ok := k.(string); ok {
		return step{name: s}
	}
	return step{name: fmt.Sprintf("[%v]", k)}
}

func (d *decodeInto) mapValue(p any, v reflect.Value) error {
	t := v.Type()
	if p == nil {
		v.SetZero()
		return nil
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(t))
	}
	key, elem := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
	ok, err := entries(p, func(k, e any) error {
		d.push(keyStep(k))
		key.SetZero()
		var kd decodeInto // the key's own errors would name a path inside it
		if err := kd.value(k, key); err != nil {
			return fmt.Errorf("%w at %s: want %s keys, got %s key", ErrMismatch, d.where(), t.Key(), describe(k))
		}
		// An ordered map (wire.Map) may hold a list or ext key, which an
		// interface-keyed map cannot hash: a mismatch, never a panic.
		if !key.Comparable() {
			return fmt.Errorf("%w at %s: %s key cannot be a map key", ErrMismatch, d.where(), describe(k))
		}
		elem.SetZero()
		if err := d.value(e, elem); err != nil {
			return err
		}
		v.SetMapIndex(key, elem)
		d.pop()
		return nil
	})
	if !ok {
		return d.mismatch("map", p)
	}
	return err
}

func (d *decodeInto) structValue(p any, v reflect.Value) error {
	fs := fieldsOf(v.Type())
	if m, ok := p.(map[string]any); ok {
		// Field by field: a lookup each, and errors in field order.
		for _, f := range fs {
			e, ok := m[f.name]
			if !ok {
				continue
			}
			d.push(step{name: f.name})
			if err := d.value(e, v.Field(f.index)); err != nil {
				return err
			}
			d.pop()
		}
		return nil
	}
	ok, err := entries(p, func(k, e any) error {
		name, isString := k.(string)
		if !isString {
			return nil // no field has that name
		}
		for _, f := range fs {
			if f.name != name {
				continue
			}
			d.push(step{name: name})
			if err := d.value(e, v.Field(f.index)); err != nil {
				return err
			}
			d.pop()
			return nil
		}
		return nil
	})
	if !ok {
		return d.mismatch("map for "+v.Type().String(), p)
	}
	return err
}
