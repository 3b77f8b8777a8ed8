package jsonform

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"omnishm/tensor"
	"omnishm/wire"
)

// Unmarshal reads one JSON-form value filling all of b (surrounding white
// space allowed). Objects become map[string]any, arrays []any, integers
// int64 (uint64 above math.MaxInt64), numbers with a fraction or an exponent
// float64, strings string (even "NaN": see the package doc), and the marker
// objects []byte, *tensor.Tensor, *tensor.Array, *tensor.Image and
// wire.Ext. Marker objects are checked strictly: their fields must all be
// present and of the right type, no other field is allowed, base64 must be
// standard with padding, and a tensor's dtype and shape must describe its
// data. The result owns its memory; nothing aliases b.
func Unmarshal(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the value", ErrInvalid)
	}
	v, err := convert(raw)
	if err != nil {
		var pe *pathError
		if errors.As(err, &pe) {
			return nil, pe.outer()
		}
		return nil, err
	}
	return v, nil
}

// pathError collects, innermost first, where in the document an error was
// found, so the message can say `at .codes.audio: ...`.
type pathError struct {
	rev []string
	err error
}

func (p *pathError) Error() string { return p.outer().Error() }
func (p *pathError) Unwrap() error { return p.err }

func (p *pathError) outer() error {
	var sb strings.Builder
	for i := len(p.rev) - 1; i >= 0; i-- {
		sb.WriteString(p.rev[i])
	}
	return fmt.Errorf("at %s: %w", sb.String(), p.err)
}

func at(step string, err error) error {
	var pe *pathError
	if errors.As(err, &pe) {
		pe.rev = append(pe.rev, step)
		return pe
	}
	return &pathError{rev: []string{step}, err: err}
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
}

// convert turns encoding/json's generic tree (with json.Number) into the
// payload's Go values.
func convert(raw any) (any, error) {
	switch x := raw.(type) {
	case nil, bool, string:
		return x, nil
	case json.Number:
		return number(string(x))
	case []any:
		for i, el := range x {
			v, err := convert(el)
			if err != nil {
				return nil, at("["+strconv.Itoa(i)+"]", err)
			}
			x[i] = v
		}
		return x, nil
	case map[string]any:
		if len(x) == 1 {
			for k, inner := range x {
				if leaf, ok := leaves[k]; ok {
					v, err := leaf(inner)
					if err != nil {
						return nil, at("."+k, err)
					}
					return v, nil
				}
			}
		}
		for k, el := range x {
			v, err := convert(el)
			if err != nil {
				return nil, at("."+strconv.Quote(k), err)
			}
			x[k] = v
		}
		return x, nil
	}
	return nil, invalid("unexpected %T", raw)
}

// number reads an integer exactly (int64, else uint64) and anything with a
// fraction or an exponent as float64; an overflowing float becomes an
// infinity, as Python's json.loads makes it.
func number(s string) (any, error) {
	if strings.ContainsAny(s, ".eE") {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, invalid("number %s: %v", s, err)
		}
		return f, nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return u, nil
	}
	return nil, invalid("integer %s outside the 64-bit range", s)
}

var leaves map[string]func(any) (any, error)

func init() {
	leaves = map[string]func(any) (any, error){
		keyBytes:   func(raw any) (any, error) { return base64Field(raw) },
		keyTensor:  leafOf(tensor.KindTensor),
		keyNDArray: leafOf(tensor.KindArray),
		keyImage:   leafOf(tensor.KindImage),
		keyExt:     extLeaf,
	}
}

// leafOf reads the object of a tensor, ndarray or image: exactly its name
// field (dtype or mode), shape and data, which must describe a valid leaf.
func leafOf(kind tensor.Kind) func(any) (any, error) {
	return func(raw any) (any, error) {
		f, err := fields(raw, kind.NameField(), "shape", "data")
		if err != nil {
			return nil, err
		}
		name, err := stringField(f, kind.NameField())
		if err != nil {
			return nil, err
		}
		shape, data, err := shapeAndData(f)
		if err != nil {
			return nil, err
		}
		leaf, err := tensor.NewLeaf(kind, name, shape, data)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return leaf, nil
	}
}

func extLeaf(raw any) (any, error) {
	f, err := fields(raw, "code", "data")
	if err != nil {
		return nil, err
	}
	n, ok := f["code"].(json.Number)
	if !ok {
		return nil, invalid("code: want an integer, got %s", describe(f["code"]))
	}
	code, err := strconv.ParseInt(string(n), 10, 8)
	if err != nil {
		return nil, invalid("code %s: want an integer in [-128, 127]", n)
	}
	data, err := base64Field(f["data"])
	if err != nil {
		return nil, at(".data", err)
	}
	return wire.Ext{Code: int8(code), Data: data}, nil
}

// fields checks that raw is an object with exactly the given keys.
func fields(raw any, keys ...string) (map[string]any, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, invalid("want an object with %s, got %s", strings.Join(keys, ", "), describe(raw))
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return nil, invalid("missing %q", k)
		}
	}
	if len(m) != len(keys) {
		for k := range m {
			if !slices.Contains(keys, k) {
				return nil, invalid("unexpected field %q", k)
			}
		}
	}
	return m, nil
}

func stringField(f map[string]any, key string) (string, error) {
	s, ok := f[key].(string)
	if !ok {
		return "", at("."+key, invalid("want a string, got %s", describe(f[key])))
	}
	return s, nil
}

func shapeAndData(f map[string]any) ([]int, []byte, error) {
	list, ok := f["shape"].([]any)
	if !ok {
		return nil, nil, at(".shape", invalid("want an array, got %s", describe(f["shape"])))
	}
	shape := make([]int, len(list))
	for i, el := range list {
		n, ok := el.(json.Number)
		d, err := strconv.ParseInt(string(n), 10, 64)
		if !ok || err != nil || d < 0 || d > math.MaxInt {
			return nil, nil, at(".shape", invalid("dimension %d: want a non-negative integer, got %s", i, describe(el)))
		}
		shape[i] = int(d)
	}
	data, err := base64Field(f["data"])
	if err != nil {
		return nil, nil, at(".data", err)
	}
	return shape, data, nil
}

func base64Field(raw any) ([]byte, error) {
	s, ok := raw.(string)
	if !ok {
		return nil, invalid("want a base64 string, got %s", describe(raw))
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, invalid("base64: %v", err)
	}
	return b, nil
}

// describe names a raw JSON value's kind for error messages.
func describe(raw any) string {
	switch x := raw.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "the number " + string(x)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", raw)
}
