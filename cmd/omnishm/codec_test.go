//go:build linux

package main

import (
	"bytes"
	"testing"

	"omnishm/frame"
	"omnishm/internal/vectortest"
	"omnishm/jsonform"
	"omnishm/tensor"
	"omnishm/wire"
)

// vectors is the vector directory, relative to this package, for bench's
// --payload flag; the other tests read vectors through vectortest.
const vectors = "../../testdata/vectors"

// TestDecodeVectors: decoding every vector file prints the case's JSON
// text, byte for byte as the Python reference printed it: in-process for
// each --as that fits, and through `omnishm decode` (auto) for one file per
// case, so the test stays light on child processes.
func TestDecodeVectors(t *testing.T) {
	vectortest.Each(t, vectortest.JSON, func(t *testing.T, c vectortest.Case, _ []byte) {
		want := vectortest.WantText(t, c)
		ran := false
		for _, form := range []vectortest.Form{vectortest.Msgpack, vectortest.Frame} {
			file := c.File(form)
			if file == "" {
				continue
			}
			b := vectortest.Read(t, file)
			for _, as := range []string{formAuto, form.String()} {
				v, err := decoders[as](b)
				if err != nil {
					t.Fatalf("%s as %s: %v", file, as, err)
				}
				got, err := jsonform.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s as %s printed\n%.300s\nwant\n%.300s", file, as, got, want)
				}
			}
			if !ran {
				ran = true
				path := vectortest.Path(t, file)
				r := omnishm(t, nil, "decode", path)
				r.wantSuccess(t)
				if !bytes.Equal(r.stdout, append(want, '\n')) {
					t.Errorf("omnishm decode %s printed\n%.300s\nwant\n%.300s", path, r.stdout, want)
				}
			}
		}
	})
}

// TestEncodeDecodeRoundTrip: a payload with a tensor of each dtype goes
// through `omnishm encode` and `omnishm decode` unchanged, in both forms;
// and each dtype alone through the same code in-process.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	all := map[string]any{"scalar": tensor.Scalar(int16(-2)), "n": []any{1.5, int64(-3), "x"}}
	for d := tensor.Bool; d <= tensor.Complex128; d++ {
		z, err := tensor.Zeros(d, 3, 2)
		if err != nil {
			t.Fatal(err)
		}
		for i := range z.Data {
			z.Data[i] = byte(i*37 + 1)
			if d == tensor.Bool {
				z.Data[i] &= 1
			}
		}
		all[d.String()] = z
		text, err := jsonform.Marshal(map[string]any{"t": z})
		if err != nil {
			t.Fatal(err)
		}
		for _, as := range []string{formFrame, formMsgpack} {
			b, err := encoders[as](mustUnmarshal(t, text))
			if err != nil {
				t.Fatalf("%v as %s: %v", d, as, err)
			}
			v, err := decoders[formAuto](b)
			if err != nil {
				t.Fatalf("%v as %s: %v", d, as, err)
			}
			if got, _ := jsonform.Marshal(v); !bytes.Equal(got, text) {
				t.Errorf("%v as %s: round trip gave\n%s\nwant\n%s", d, as, got, text)
			}
		}
	}
	text, err := jsonform.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	text = append(text, '\n')
	for _, as := range []string{formFrame, formMsgpack} {
		t.Run(as, func(t *testing.T) {
			enc := omnishm(t, text, "encode", "--as", as, "-")
			enc.wantSuccess(t)
			if got := frame.Detect(enc.stdout); got != (as == formFrame) {
				t.Errorf("encoded bytes look like a frame: %v", got)
			}
			dec := omnishm(t, enc.stdout, "decode")
			dec.wantSuccess(t)
			if !bytes.Equal(dec.stdout, text) {
				t.Errorf("round trip gave\n%s\nwant\n%s", dec.stdout, text)
			}
		})
	}
}

func mustUnmarshal(t *testing.T, text []byte) any {
	t.Helper()
	v, err := jsonform.Unmarshal(text)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEncodeTensorFree: with --as frame (or auto, the default), a payload
// without tensors is written in its plain msgpack form (SPEC §4).
func TestEncodeTensorFree(t *testing.T) {
	text := []byte(`{"a":[1,2.5,"NaN",{"$bytes":"AQI="}],"b":null}`)
	want, err := wire.Marshal(mustUnmarshal(t, text))
	if err != nil {
		t.Fatal(err)
	}
	for _, as := range []string{formFrame, formMsgpack, ""} {
		args := []string{"encode", "--as", as}
		if as == "" {
			args = args[:1]
		}
		r := omnishm(t, text, args...)
		r.wantSuccess(t)
		if !bytes.Equal(r.stdout, want) {
			t.Errorf("%v wrote %x, want %x", args, r.stdout, want)
		}
	}
}

func TestBadInput(t *testing.T) {
	frameBytes := vectortest.Read(t, "tree_float32.frame")
	cut := frameBytes[:len(frameBytes)-16]
	msgpackBytes := vectortest.Read(t, "scalars.msgpack")
	cases := []struct {
		name  string
		stdin []byte
		args  []string
		msg   string
	}{
		{"bad json", []byte(`{"a":`), []string{"encode", "--as", "msgpack"}, "invalid JSON form"},
		{"json trailing", []byte(`1 2`), []string{"encode", "--as", "frame"}, "data after the value"},
		{"bad tensor", []byte(`{"$tensor":{"dtype":"float32","shape":[2],"data":"AAAAAA=="}}`), []string{"encode", "--as", "frame"}, "needs 8 bytes, have 4"},
		{"bad dtype", []byte(`{"$tensor":{"dtype":"float8","shape":[],"data":"AA=="}}`), []string{"encode", "--as", "msgpack"}, `"float8"`},
		{"missing file", nil, []string{"encode", "--as", "msgpack", "/nonexistent/x.json"}, "/nonexistent/x.json"},
		{"empty bytes", nil, []string{"decode"}, "decode: input is neither a tensor frame nor msgpack: wire: corrupt msgpack"},
		{"garbage", []byte{0xc1}, []string{"decode"}, "decode: input is neither a tensor frame nor msgpack: wire: corrupt msgpack"},
		{"cut msgpack", msgpackBytes[:len(msgpackBytes)-1], []string{"decode", "--as", "msgpack"}, "decode: input is not msgpack: wire: corrupt msgpack"},
		{"cut frame", cut, []string{"decode", "--as", "frame"}, "decode: input begins as a tensor frame but is cut short or corrupt: frame: corrupt"},
		{"cut frame, auto", cut, []string{"decode"}, "decode: input begins as a tensor frame but is cut short or corrupt: frame: corrupt"},
		{"cut frame header, auto", frameBytes[:40], []string{"decode"}, "decode: input begins as a tensor frame but is cut short or corrupt: frame: corrupt"},
		{"frame read as msgpack", frameBytes, []string{"decode", "--as", "msgpack"}, "decode: input is a tensor frame, not msgpack: use --as frame or auto"},
		{"msgpack read as frame", msgpackBytes, []string{"decode", "--as", "frame"}, "decode: input is msgpack, not a tensor frame: use --as msgpack or auto"},
		{"json given to decode", vectortest.Read(t, "tree_float32.json"), []string{"decode"}, "decode: input is JSON, not a payload's bytes (a frame or msgpack): 'omnishm encode'"},
		{"json given as frame", vectortest.Read(t, "tree_float32.json"), []string{"decode", "--as", "frame"}, "decode: input is JSON"},
		{"msgpack given to encode", msgpackBytes, []string{"encode"}, "encode: input is not a payload's JSON form: jsonform: invalid JSON form"},
		{"missing input file", nil, []string{"decode", "/nonexistent/x.bin"}, "/nonexistent/x.bin"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := omnishm(t, c.stdin, c.args...)
			r.wantFailure(t, exitFail, c.msg)
			if bytes.Contains(r.stderr, []byte(c.args[0]+": "+c.args[0]+":")) {
				t.Errorf("doubled prefix: %s", r.stderr)
			}
		})
	}
}

// TestDecodeChangedTensorByte: a changed byte of tensor data changes the
// printed value and nothing else.
func TestDecodeChangedTensorByte(t *testing.T) {
	b := vectortest.Read(t, "large_tensor.frame")
	want := vectortest.Read(t, "large_tensor.json")
	headerLen := int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24
	b[(4+headerLen+15)&^15] ^= 0xff
	r := omnishm(t, b, "decode")
	r.wantSuccess(t)
	got := bytes.TrimSpace(r.stdout)
	want = bytes.TrimSpace(want)
	if len(got) != len(want) {
		t.Fatalf("printed %d bytes, want %d", len(got), len(want))
	}
	diff := 0
	for i := range got {
		if got[i] != want[i] {
			diff++
		}
	}
	if diff == 0 || diff > 2 { // one byte changes one or two base64 digits
		t.Errorf("%d characters differ", diff)
	}
}

// FuzzDecodeAuto: whatever the bytes, decoding gives a value or a refusal
// of the form it was taken for.
func FuzzDecodeAuto(f *testing.F) {
	vectortest.Seed(f, vectortest.Frame)
	vectortest.FuzzDecoder(f, vectortest.Msgpack, decoders[formAuto], func(t *testing.T, _ []byte, v any) {
		if _, err := jsonform.Marshal(v); err != nil {
			t.Fatalf("decoded value has no JSON form: %v", err)
		}
	}, wire.ErrCorrupt, frame.ErrCorrupt)
}
