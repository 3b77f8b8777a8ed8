package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"omnishm/jsonform"
	"omnishm/tensor"
	"omnishm/wire"
)

const vectors = "../../testdata/vectors"

// vectorFiles lists the payload vectors: name -> {json, msgpack, frame}
// file names (empty when the case has none).
func vectorFiles(t *testing.T) map[string][3]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vectors, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var index map[string]map[string]any
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	out := map[string][3]string{}
	for name, c := range index {
		if _, ring := c["bin"]; ring {
			continue
		}
		str := func(k string) string { s, _ := c[k].(string); return s }
		out[name] = [3]string{str("json"), str("msgpack"), str("frame")}
	}
	if len(out) < 25 {
		t.Fatalf("only %d vector cases", len(out))
	}
	return out
}

// TestDecodeVectors: decoding every vector file prints the case's JSON
// text, byte for byte as the Python reference printed it: in-process for
// each --as, and through `omnishm decode` (auto) for one file per case, so
// the test stays light on child processes.
func TestDecodeVectors(t *testing.T) {
	for name, files := range vectorFiles(t) {
		want, err := os.ReadFile(filepath.Join(vectors, files[0]))
		if err != nil {
			t.Fatal(err)
		}
		want = bytes.TrimSuffix(want, []byte("\n"))
		t.Run(name, func(t *testing.T) {
			ran := false
			for i, form := range []string{"", formMsgpack, formFrame} {
				if i == 0 || files[i] == "" {
					continue
				}
				path := filepath.Join(vectors, files[i])
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				for _, as := range []string{formAuto, form} {
					v, err := decodePayload(b, as)
					if err != nil {
						t.Fatalf("%s as %s: %v", files[i], as, err)
					}
					got, err := jsonform.Marshal(v)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("%s as %s printed\n%.300s\nwant\n%.300s", files[i], as, got, want)
					}
				}
				if !ran {
					ran = true
					r := omnishm(t, nil, "decode", path)
					r.wantSuccess(t)
					if !bytes.Equal(r.stdout, append(want, '\n')) {
						t.Errorf("omnishm decode %s printed\n%.300s\nwant\n%.300s", path, r.stdout, want)
					}
				}
			}
		})
	}
}

// TestLooksLikeFrame: the auto heuristic tells every vector's two forms
// apart, and rejects cut or mangled frames without reading out of bounds.
func TestLooksLikeFrame(t *testing.T) {
	for name, files := range vectorFiles(t) {
		if files[1] != "" {
			b, _ := os.ReadFile(filepath.Join(vectors, files[1]))
			if looksLikeFrame(b) {
				t.Errorf("%s: msgpack form taken for a frame", name)
			}
		}
		if files[2] != "" {
			b, _ := os.ReadFile(filepath.Join(vectors, files[2]))
			if !looksLikeFrame(b) {
				t.Errorf("%s: frame not recognised", name)
			}
			// Cut before the data start: no longer a frame.
			n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24
			if looksLikeFrame(b[:4+n-1]) || looksLikeFrame(b[:3]) {
				t.Errorf("%s: cut frame taken for a frame", name)
			}
		}
	}
	for _, b := range [][]byte{nil, {0xff, 0xff, 0xff, 0xff}, {0, 0, 0, 0}, {1, 0, 0, 0, 0x93}} {
		if looksLikeFrame(b) {
			t.Errorf("looksLikeFrame(%x) = true", b)
		}
	}
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
			b, err := encodePayload(mustUnmarshal(t, text), as)
			if err != nil {
				t.Fatalf("%v as %s: %v", d, as, err)
			}
			v, err := decodePayload(b, formAuto)
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
			if got := looksLikeFrame(enc.stdout); got != (as == formFrame) {
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

// TestEncodeTensorFree: with --as frame, a payload without tensors is
// written in its plain msgpack form (SPEC §4).
func TestEncodeTensorFree(t *testing.T) {
	text := []byte(`{"a":[1,2.5,"NaN",{"$bytes":"AQI="}],"b":null}`)
	v, err := jsonform.Unmarshal(text)
	if err != nil {
		t.Fatal(err)
	}
	want, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, as := range []string{formFrame, formMsgpack} {
		r := omnishm(t, text, "encode", "--as", as)
		r.wantSuccess(t)
		if !bytes.Equal(r.stdout, want) {
			t.Errorf("--as %s wrote %x, want %x", as, r.stdout, want)
		}
	}
}

func TestBadInput(t *testing.T) {
	frameBytes, err := os.ReadFile(filepath.Join(vectors, "tree_float32.frame"))
	if err != nil {
		t.Fatal(err)
	}
	cut := frameBytes[:len(frameBytes)-16]
	msgpackBytes, err := os.ReadFile(filepath.Join(vectors, "scalars.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
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
		{"empty bytes", nil, []string{"decode"}, "decode:"},
		{"garbage", []byte{0xc1}, []string{"decode"}, "decode:"},
		{"cut msgpack", msgpackBytes[:len(msgpackBytes)-1], []string{"decode", "--as", "msgpack"}, "decode:"},
		{"cut frame", cut, []string{"decode", "--as", "frame"}, "decode:"},
		{"frame read as msgpack", frameBytes, []string{"decode", "--as", "msgpack"}, "decode:"},
		{"msgpack read as frame", msgpackBytes, []string{"decode", "--as", "frame"}, "decode:"},
		{"missing input file", nil, []string{"decode", "/nonexistent/x.bin"}, "/nonexistent/x.bin"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			omnishm(t, c.stdin, c.args...).wantFailure(t, exitFail, c.msg)
		})
	}
}

// TestDecodeChangedTensorByte: a changed byte of tensor data changes the
// printed value and nothing else.
func TestDecodeChangedTensorByte(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(vectors, "large_tensor.frame"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(vectors, "large_tensor.json"))
	if err != nil {
		t.Fatal(err)
	}
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

// FuzzDecodeAuto: whatever the bytes, decoding gives a value or an error.
func FuzzDecodeAuto(f *testing.F) {
	for _, name := range []string{"tree_float16.frame", "scalars.msgpack", "ext_literal.frame", "typed_payload.msgpack"} {
		if b, err := os.ReadFile(filepath.Join(vectors, name)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodePayload(b, formAuto)
		if err != nil {
			return
		}
		if _, err := jsonform.Marshal(v); err != nil {
			t.Fatalf("decoded value has no JSON form: %v", err)
		}
	})
}
