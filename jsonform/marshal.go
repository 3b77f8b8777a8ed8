package jsonform

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"omnishm/tensor"
	"omnishm/wire"
)

// Marshal returns the JSON form of v on one line, without a trailing
// newline. v is a decoded payload: nil, bool, any Go integer or float type,
// string, []byte, []any, map[string]any, map[any]any, wire.Map, wire.Ext,
// *tensor.Tensor, *tensor.Array, *tensor.Image; other slices, arrays, maps
// and pointers are walked by reflection. A slice or array of a tensor
// dtype's elements ([]float32, [4]int64, ...) prints as the 1-D $tensor it
// travels as (wire.SliceTensor), so a Go value and the payload decoded
// from it print alike. Tensors, arrays and images must be
// valid (their shape must describe their data), so that what Marshal prints
// Unmarshal reads back.
func Marshal(v any) ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 256)}
	if err := e.value(v); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// MarshalIndent is Marshal with the output indented as json.MarshalIndent
// indents it; numbers keep the text Marshal gave them.
func MarshalIndent(v any, prefix, indent string) ([]byte, error) {
	b, err := Marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, prefix, indent); err != nil {
		return nil, fmt.Errorf("jsonform: indent: %w", err)
	}
	return out.Bytes(), nil
}

type encoder struct {
	buf   []byte
	depth int
}

func (e *encoder) value(v any) error {
	switch x := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
	case bool:
		e.buf = strconv.AppendBool(e.buf, x)
	case int:
		e.buf = strconv.AppendInt(e.buf, int64(x), 10)
	case int64: // what decoders yield; other integer types go by reflection
		e.buf = strconv.AppendInt(e.buf, x, 10)
	case uint64:
		e.buf = strconv.AppendUint(e.buf, x, 10)
	case float32:
		e.float(float64(x))
	case float64:
		e.float(x)
	case string:
		e.buf = appendString(e.buf, x)
	case []byte:
		e.marker(keyBytes)
		e.base64(x)
		e.buf = append(e.buf, '}')
	case []any:
		return e.list(len(x), func(i int) any { return x[i] })
	case map[string]any:
		return e.stringMap(x)
	case map[any]any:
		kvs := make([]wire.KV, 0, len(x))
		for k, v := range x {
			kvs = append(kvs, wire.KV{Key: k, Value: v})
		}
		return e.pairs(kvs)
	case wire.Map:
		return e.pairs(x)
	case wire.Ext:
		e.ext(x)
	case *wire.Ext:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			return nil
		}
		e.ext(*x)
	case *tensor.Tensor:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			return nil
		}
		return e.tensor(x)
	case *tensor.Array:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			return nil
		}
		return e.array(x)
	case *tensor.Image:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			return nil
		}
		return e.image(x)
	default:
		return e.reflectValue(reflect.ValueOf(v))
	}
	return nil
}

// reflectValue covers the Go types the switch above does not name: named
// scalar types, typed slices and maps, pointers, and value forms of the
// leaf types.
func (e *encoder) reflectValue(rv reflect.Value) error {
	switch rv.Kind() {
	case reflect.Bool:
		return e.value(rv.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return e.value(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return e.value(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return e.value(rv.Float())
	case reflect.String:
		return e.value(rv.String())
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return e.value(nil)
		}
		if rv.Kind() == reflect.Pointer {
			// A value form of a leaf type (tensor.Tensor, not *tensor.Tensor)
			// reaches here through its address.
			switch p := rv.Interface().(type) {
			case *tensor.Tensor, *tensor.Array, *tensor.Image, *wire.Ext:
				return e.value(p)
			}
		}
		return e.nested(func() error { return e.value(rv.Elem().Interface()) })
	case reflect.Struct:
		switch x := rv.Interface().(type) {
		case tensor.Tensor:
			return e.tensor(&x)
		case tensor.Array:
			return e.array(&x)
		case tensor.Image:
			return e.image(&x)
		}
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			if rv.Kind() == reflect.Array { // bin too, as wire writes it
				b := make([]byte, rv.Len())
				reflect.Copy(reflect.ValueOf(b), rv)
				return e.value(b)
			}
			return e.value(rv.Bytes())
		}
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return e.value(nil)
		}
		if t, ok := wire.SliceTensor(rv); ok {
			return e.tensor(t) // what it travels as, and what a receiver decodes
		}
		return e.list(rv.Len(), func(i int) any { return rv.Index(i).Interface() })
	case reflect.Map:
		if rv.IsNil() {
			return e.value(nil)
		}
		kvs := make([]wire.KV, 0, rv.Len())
		it := rv.MapRange()
		for it.Next() {
			kvs = append(kvs, wire.KV{Key: it.Key().Interface(), Value: it.Value().Interface()})
		}
		return e.pairs(kvs)
	}
	return fmt.Errorf("%w: %s", ErrUnsupported, rv.Type())
}

func (e *encoder) nested(f func() error) error {
	if e.depth >= maxDepth {
		return fmt.Errorf("%w: nested deeper than %d (a cycle?)", ErrUnsupported, maxDepth)
	}
	e.depth++
	err := f()
	e.depth--
	return err
}

func (e *encoder) list(n int, at func(int) any) error {
	return e.nested(func() error {
		e.buf = append(e.buf, '[')
		for i := range n {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if err := e.value(at(i)); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, ']')
		return nil
	})
}

func (e *encoder) stringMap(m map[string]any) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return e.nested(func() error {
		e.buf = append(e.buf, '{')
		for i, k := range keys {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.buf = appendString(e.buf, k)
			e.buf = append(e.buf, ':')
			if err := e.value(m[k]); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, '}')
		return nil
	})
}

// pairs prints a map whose keys may be of any scalar type, converting them
// to strings as Python's json.dumps does, sorted by that text.
func (e *encoder) pairs(kvs []wire.KV) error {
	type entry struct {
		key   string
		value any
	}
	entries := make([]entry, len(kvs))
	for i, kv := range kvs {
		k, err := keyText(kv.Key)
		if err != nil {
			return err
		}
		entries[i] = entry{k, kv.Value}
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.key, b.key) })
	for i := 1; i < len(entries); i++ {
		if entries[i].key == entries[i-1].key {
			return fmt.Errorf("%w: two map keys print as %q", ErrUnsupported, entries[i].key)
		}
	}
	return e.nested(func() error {
		e.buf = append(e.buf, '{')
		for i, en := range entries {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.buf = appendString(e.buf, en.key)
			e.buf = append(e.buf, ':')
			if err := e.value(en.value); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, '}')
		return nil
	})
}

// keyText converts a map key to the string Python's json.dumps prints for it.
func keyText(k any) (string, error) {
	switch x := k.(type) {
	case string:
		return x, nil
	case nil:
		return "null", nil
	case bool:
		return strconv.FormatBool(x), nil
	case float32:
		return floatText(float64(x)), nil
	case float64:
		return floatText(x), nil
	}
	rv := reflect.ValueOf(k)
	switch rv.Kind() {
	case reflect.String:
		return rv.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), nil
	}
	return "", fmt.Errorf("%w: map key of type %T", ErrUnsupported, k)
}

func (e *encoder) tensor(t *tensor.Tensor) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	e.leaf(keyTensor, `,"dtype":`, t.DType.String(), t.Shape, t.Data)
	return nil
}

// leaf writes {"$marker": {"data": base64, "<name>": name, "shape": [...]}},
// keys sorted as everywhere in the JSON form.
func (e *encoder) leaf(marker, nameField, name string, shape []int, data []byte) {
	e.marker(marker)
	e.buf = append(e.buf, `{"data":`...)
	e.base64(data)
	e.buf = append(e.buf, nameField...)
	e.buf = appendString(e.buf, name)
	e.shape(shape)
	e.buf = append(e.buf, "}}"...)
}

func (e *encoder) array(a *tensor.Array) error {
	if err := a.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	e.leaf(keyNDArray, `,"dtype":`, a.DType, a.Shape, a.Data)
	return nil
}

func (e *encoder) image(m *tensor.Image) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	e.leaf(keyImage, `,"mode":`, m.Mode, m.Shape, m.Data)
	return nil
}

func (e *encoder) ext(x wire.Ext) {
	e.marker(keyExt)
	e.buf = append(e.buf, `{"code":`...)
	e.buf = strconv.AppendInt(e.buf, int64(x.Code), 10)
	e.buf = append(e.buf, `,"data":`...)
	e.base64(x.Data)
	e.buf = append(e.buf, "}}"...)
}

// marker opens a one-key marker object: {"$key":
func (e *encoder) marker(key string) {
	e.buf = append(e.buf, `{"`...)
	e.buf = append(e.buf, key...)
	e.buf = append(e.buf, `":`...)
}

// shape appends `,"shape":[...]`, the last key of every leaf object.
func (e *encoder) shape(s []int) {
	e.buf = append(e.buf, `,"shape":[`...)
	for i, d := range s {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.buf = strconv.AppendInt(e.buf, int64(d), 10)
	}
	e.buf = append(e.buf, ']')
}

func (e *encoder) base64(b []byte) {
	e.buf = append(e.buf, '"')
	e.buf = base64.StdEncoding.AppendEncode(e.buf, b)
	e.buf = append(e.buf, '"')
}

func (e *encoder) float(f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		e.buf = appendString(e.buf, floatText(f))
		return
	}
	e.buf = append(e.buf, floatText(f)...)
}

// floatText prints f as Python's repr does: the shortest digits that read
// back as f, in positional form when the decimal exponent is in [-4, 16)
// and with ".0" added to a whole number, in exponent form otherwise
// ("1e-05", "1e+16"). NaN and the infinities print as json.dumps prints
// them, which SPEC §10 turns into strings.
func floatText(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	i := bytes.LastIndexByte([]byte(s), 'e')
	exp, _ := strconv.Atoi(s[i+1:])
	if exp < -4 || exp >= 16 {
		return s // Go's shortest 'e' form is Python's: "1e+16", "1.5e-05".
	}
	s = strconv.FormatFloat(f, 'f', -1, 64)
	for j := 0; j < len(s); j++ {
		if s[j] == '.' {
			return s
		}
	}
	return s + ".0"
}

// appendString appends s as a JSON string escaped as Python's json.dumps
// escapes it with ensure_ascii: printable ASCII as is, the short escapes
// for \" \\ \n \r \t \b \f, and \uXXXX (lower-case hex, surrogate pairs
// above U+FFFF) for everything else. Invalid UTF-8 prints as \ufffd.
func appendString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	u := func(buf []byte, r rune) []byte {
		return append(buf, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			case '\b':
				buf = append(buf, '\\', 'b')
			case '\f':
				buf = append(buf, '\\', 'f')
			default:
				if c < 0x20 || c == 0x7f {
					buf = u(buf, rune(c))
				} else {
					buf = append(buf, c)
				}
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r > 0xffff {
			r1, r2 := utf16.EncodeRune(r)
			buf = u(u(buf, r1), r2)
		} else {
			buf = u(buf, r)
		}
	}
	return append(buf, '"')
}
