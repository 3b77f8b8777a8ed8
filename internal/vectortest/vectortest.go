// Package vectortest loads the reference vectors made by the Python
// implementation (testdata/vectors) for the tests of every package: the
// index, the files from any package's directory, a subtest per case (Each),
// fuzz corpora seeded with them (Seed), the JSON form (SPEC §10) turned
// into expected values by a decoder of its own (independent of package
// jsonform, which it must not import: jsonform's own tests use it), and a
// content comparison of decoded payloads (SameValue).
package vectortest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"omnishm/tensor"
	"omnishm/wire"
)

// FromJSON turns SPEC §10's JSON form into the values Unmarshal yields.
// Floats spelled as the strings "NaN" and "Infinity" stay strings here;
// SameValue accepts them for a float64.
func FromJSON(t testing.TB, raw []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	out, err := convertJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func convertJSON(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		s := x.String()
		if strings.ContainsAny(s, ".eE") {
			return strconv.ParseFloat(s, 64)
		}
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		return strconv.ParseUint(s, 10, 64)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = convertJSON(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		if len(x) == 1 {
			for k, body := range x {
				if leaf, ok, err := jsonLeaf(k, body); ok || err != nil {
					return leaf, err
				}
			}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			var err error
			if out[k], err = convertJSON(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}

func jsonLeaf(kind string, body any) (any, bool, error) {
	if kind == "$bytes" {
		b, err := base64.StdEncoding.DecodeString(body.(string))
		return b, true, err
	}
	obj, ok := body.(map[string]any)
	if !ok || !strings.HasPrefix(kind, "$") {
		return nil, false, nil
	}
	data, err := base64.StdEncoding.DecodeString(fmt.Sprint(obj["data"]))
	if err != nil {
		return nil, true, err
	}
	var shape []int
	if dims, ok := obj["shape"].([]any); ok {
		shape = make([]int, len(dims))
		for i, d := range dims {
			n, err := d.(json.Number).Int64()
			if err != nil {
				return nil, true, err
			}
			shape[i] = int(n)
		}
	}
	switch kind {
	case "$tensor":
		dt, err := tensor.ParseDType(obj["dtype"].(string))
		if err != nil {
			return nil, true, err
		}
		return &tensor.Tensor{DType: dt, Shape: shape, Data: data}, true, nil
	case "$ndarray":
		return &tensor.Array{DType: obj["dtype"].(string), Shape: shape, Data: data}, true, nil
	case "$image":
		return &tensor.Image{Mode: obj["mode"].(string), Shape: shape, Data: data}, true, nil
	case "$ext":
		code, err := obj["code"].(json.Number).Int64()
		return wire.Ext{Code: int8(code), Data: data}, true, err
	}
	return nil, false, nil
}

// SameValue compares decoded payloads: leaves by content, floats by bits
// (NaN equal to NaN and to the JSON string "NaN"), maps in any order.
func SameValue(got, want any) error {
	switch w := want.(type) {
	case *tensor.Tensor:
		g, ok := got.(*tensor.Tensor)
		if !ok || !g.Equal(w) {
			return fmt.Errorf("got %v, want %v", got, w)
		}
		return nil
	case *tensor.Array:
		g, ok := got.(*tensor.Array)
		if !ok || !g.Equal(w) {
			return fmt.Errorf("got %#v, want %#v", got, w)
		}
		return nil
	case *tensor.Image:
		g, ok := got.(*tensor.Image)
		if !ok || !g.Equal(w) {
			return fmt.Errorf("got %#v, want %#v", got, w)
		}
		return nil
	case wire.Ext:
		g, ok := got.(wire.Ext)
		if !ok || g.Code != w.Code || !bytes.Equal(g.Data, w.Data) {
			return fmt.Errorf("got %#v, want %#v", got, w)
		}
		return nil
	case []byte:
		g, ok := got.([]byte)
		if !ok || !bytes.Equal(g, w) {
			return fmt.Errorf("got %#v, want %#v", got, w)
		}
		return nil
	case float64:
		g, ok := got.(float64)
		if !ok || !(math.Float64bits(g) == math.Float64bits(w) || math.IsNaN(g) && math.IsNaN(w)) {
			return fmt.Errorf("got %#v, want %v", got, w)
		}
		return nil
	case string:
		if g, ok := got.(float64); ok {
			special := map[string]bool{"NaN": math.IsNaN(g), "Infinity": math.IsInf(g, 1), "-Infinity": math.IsInf(g, -1)}
			if !special[w] {
				return fmt.Errorf("got %v, want %s", g, w)
			}
			return nil
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("got %#v, want a list of %d", got, len(w))
		}
		for i := range w {
			if err := SameValue(g[i], w[i]); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	case map[string]any:
		g := AsStringMap(got)
		if g == nil || len(g) != len(w) {
			return fmt.Errorf("got %#v, want a map of %d", got, len(w))
		}
		for k := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("missing key %q", k)
			}
			if err := SameValue(gv, w[k]); err != nil {
				return fmt.Errorf("[%q]: %w", k, err)
			}
		}
		return nil
	case wire.Map:
		return SameValue(got, AsStringMap(w))
	case map[any]any:
		g, ok := got.(map[any]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("got %#v, want a map of %d", got, len(w))
		}
		for k, wv := range w {
			if f, ok := k.(float64); ok && math.IsNaN(f) {
				continue // a NaN key cannot be looked up
			}
			if err := SameValue(g[k], wv); err != nil {
				return fmt.Errorf("[%v]: %w", k, err)
			}
		}
		return nil
	}
	if got != want {
		return fmt.Errorf("got %#v (%T), want %#v (%T)", got, got, want, want)
	}
	return nil
}

// AsStringMap returns a decoded map with string keys as a map[string]any,
// whether it was decoded as one or in wire order (wire.Map); nil for
// anything else.
func AsStringMap(v any) map[string]any {
	switch x := v.(type) {
	case map[string]any:
		return x
	case wire.Map:
		m := make(map[string]any, len(x))
		for _, kv := range x {
			k, ok := kv.Key.(string)
			if !ok {
				return nil
			}
			m[k] = kv.Value
		}
		return m
	}
	return nil
}
