package jsonform_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"omnishm/frame"
	"omnishm/internal/vectortest"
	"omnishm/jsonform"
	"omnishm/wire"
)

// TestVectors: each C.msgpack decoded by wire, and each C.frame decoded by
// frame, prints as C.json; and C.json, read by jsonform and encoded again
// in the same form, decodes to the same.
func TestVectors(t *testing.T) {
	for _, c := range vectortest.LoadIndex(t) {
		if c.Msgpack == "" && c.MsgpackRefused == "" {
			t.Errorf("%s: neither msgpack nor msgpack_refused", c.Name)
		}
	}
	forms := []struct {
		form   vectortest.Form
		encode func(any) ([]byte, error)
		decode func([]byte) (any, error)
	}{
		{vectortest.Msgpack, wire.Marshal, wire.Unmarshal},
		{vectortest.Frame, frame.Marshal, frame.Decode},
	}
	for _, f := range forms {
		t.Run(f.form.String(), func(t *testing.T) {
			vectortest.Each(t, f.form, func(t *testing.T, c vectortest.Case, b []byte) {
				want := vectortest.Read(t, c.JSON)
				v, err := f.decode(b)
				if err != nil {
					t.Fatal(err)
				}
				requirePrints(t, "decoded "+c.File(f.form), v, want)

				in, err := jsonform.Unmarshal(want)
				if err != nil {
					t.Fatal(err)
				}
				again, err := f.encode(in)
				if err != nil {
					t.Fatal(err)
				}
				back, err := f.decode(again)
				if err != nil {
					t.Fatal(err)
				}
				requirePrints(t, "re-encoded "+c.JSON, back, want)
				// Tensors read from the text make a frame; a tensor-free
				// case travels as msgpack (SPEC §4).
				if b, err := frame.Marshal(in); err != nil || frame.Detect(b) == c.FrameIsPlainMsgpack {
					t.Fatalf("frame.Marshal: %v; Detect = %v with frame_is_plain_msgpack = %v", err, frame.Detect(b), c.FrameIsPlainMsgpack)
				}
			})
		})
	}
}

// TestVectorTexts reads every JSON text the Python reference printed and
// checks that Marshal prints the value read back byte for byte the same:
// floats as repr, keys sorted, ASCII escapes as json.dumps makes them.
func TestVectorTexts(t *testing.T) {
	vectortest.Each(t, vectortest.JSON, func(t *testing.T, c vectortest.Case, _ []byte) {
		text := vectortest.WantText(t, c)
		v, err := jsonform.Unmarshal(text)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := jsonform.Marshal(v); err != nil || !bytes.Equal(got, text) {
			t.Errorf("Marshal(Unmarshal(%s)) differs (%v):\n got %.300s\nwant %.300s", c.JSON, err, got, text)
		}
	})
}

// requirePrints fails the test unless v's JSON form and the text want are
// the same parsed values, compared independently of jsonform: integers
// exactly, other numbers as float64 bits (so 1e16 and 1e+16 agree, 0.0 and
// -0.0 do not), and an integer never equals a float.
func requirePrints(t *testing.T, what string, v any, want []byte) {
	t.Helper()
	got, err := jsonform.Marshal(v)
	if err != nil {
		t.Fatalf("%s: Marshal: %v", what, err)
	}
	g, err := parseJSON(got)
	if err != nil {
		t.Fatalf("%s: %v in %.200s", what, err, got)
	}
	w, err := parseJSON(want)
	if err != nil {
		t.Fatalf("%s: want text: %v", what, err)
	}
	if diff := jsonDiff("", g, w); diff != "" {
		t.Fatalf("%s differs at %s\n got %.300s\nwant %.300s", what, diff, got, want)
	}
}

func parseJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func jsonDiff(path string, a, b any) string {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return path + " (object)"
		}
		for k, av := range x {
			bv, ok := y[k]
			if !ok {
				return path + "." + k + " (missing)"
			}
			if d := jsonDiff(path+"."+k, av, bv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return path + " (array)"
		}
		for i := range x {
			if d := jsonDiff(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); d != "" {
				return d
			}
		}
		return ""
	case json.Number:
		y, ok := b.(json.Number)
		if !ok || !sameNumber(string(x), string(y)) {
			return fmt.Sprintf("%s (%v vs %v)", path, a, b)
		}
		return ""
	}
	if a != b {
		return fmt.Sprintf("%s (%#v vs %#v)", path, a, b)
	}
	return ""
}

func sameNumber(a, b string) bool {
	isFloat := func(s string) bool { return strings.ContainsAny(s, ".eE") }
	if isFloat(a) != isFloat(b) {
		return false
	}
	if !isFloat(a) {
		x, ok1 := new(big.Int).SetString(a, 10)
		y, ok2 := new(big.Int).SetString(b, 10)
		return ok1 && ok2 && x.Cmp(y) == 0
	}
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && math.Float64bits(x) == math.Float64bits(y)
}

func TestSameNumber(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"1e16", "1e+16", true},
		{"1e16", "10000000000000000.0", true},
		{"1", "1.0", false},
		{"0.0", "-0.0", false},
		{"18446744073709551615", "18446744073709551615", true},
		{"18446744073709551615", "18446744073709551614", false},
	}
	for _, c := range cases {
		if got := sameNumber(c.a, c.b); got != c.want {
			t.Errorf("sameNumber(%s, %s) = %v", c.a, c.b, got)
		}
	}
}
