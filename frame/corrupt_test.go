package frame_test

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"omnishm/frame"
	"omnishm/tensor"
	"omnishm/wire"
)

// build makes a frame from a hand-written header (hex msgpack) and data.
func build(header string, data int) []byte {
	h, err := hex.DecodeString(strings.ReplaceAll(header, " ", ""))
	if err != nil {
		panic(err)
	}
	n := (4 + len(h) + 15) &^ 15
	b := make([]byte, n+data)
	binary.LittleEndian.PutUint32(b, uint32(len(h)))
	copy(b[4:], h)
	return b
}

const (
	nonceHex = "c410 00112233445566778899aabbccddeeff"
	// tree: ext 42 with nonceHex and index 0
	refTree = "c417 c7142a 00112233445566778899aabbccddeeff 00000000"
)

func TestDecodeCorrupt(t *testing.T) {
	good := build("93 91 93a5696e743634 9101 00 "+refTree+nonceHex, 8)
	if _, err := frame.Decode(good); err != nil {
		t.Fatalf("the well-formed base case fails: %v", err)
	}
	headerPastEnd := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(headerPastEnd, 1<<31)
	huge := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(huge, 0xffffffff)
	cases := map[string][]byte{
		"empty":                  {},
		"short length":           {1, 0},
		"truncated header":       good[:20],
		"header length past end": headerPastEnd,
		"header length u32 max":  huge,
		"truncated data":         good[:len(good)-1],
		"offset past the end":    build("93 91 93a5696e743634 9101 cd0100 "+refTree+nonceHex, 8),
		"empty tensor past end":  build("93 91 93a5696e743634 9100 cd0100 "+refTree+nonceHex, 8),
		"shape overflow":         build("93 91 93a5696e743634 92cf7fffffffffffffff cf7fffffffffffffff 00 "+refTree+nonceHex, 8),
		"negative dim":           build("93 91 93a5696e743634 91ff 00 "+refTree+nonceHex, 8),
		"negative int8 dim":      build("93 91 93a5696e743634 91d0fe 00 "+refTree+nonceHex, 8),
		"huge dim":               build("93 91 93a5696e743634 91cf7fffffffffffffff 00 "+refTree+nonceHex, 8),
		"dim above int64":        build("93 91 93a5696e743634 91cfffffffffffffffff 00 "+refTree+nonceHex, 8),
		"negative offset":        build("93 91 93a5696e743634 9101 ff "+refTree+nonceHex, 8),
		"unknown dtype":          build("93 91 93a5696e743132 9101 00 "+refTree+nonceHex, 8),
		"dtype not a string":     build("93 91 93 01 9101 00 "+refTree+nonceHex, 8),
		"index out of range":     build("93 91 93a5696e743634 9101 00 c417 c7142a 00112233445566778899aabbccddeeff 01000000"+nonceHex, 8),
		"descriptor of 2":        build("93 91 92a5696e743634 9101 "+refTree+nonceHex, 8),
		"header of 2":            build("92 91 93a5696e743634 9101 00 "+refTree, 8),
		"trailing header bytes":  build("93 91 93a5696e743634 9101 00 "+refTree+nonceHex+"c0", 8),
		"descriptor count lies":  build("93 ddffffffff", 0),
		"tree not bin":           build("93 91 93a5696e743634 9101 00 c0"+nonceHex, 8),
		"tree corrupt":           build("93 91 93a5696e743634 9101 00 c401c1"+nonceHex, 8),
		"tree length past end":   build("93 91 93a5696e743634 9101 00 c6ffffffff", 8),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := frame.Decode(b); !errors.Is(err, frame.ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

// Descriptors that all name the whole data area of a large frame would each
// get their own copy of it: refused before anything is copied.
func TestOverlappingRegionsRefused(t *testing.T) {
	const data, count = 128 << 10, 2000
	header := "93 dc" + fmt.Sprintf("%04x", count) +
		strings.Repeat("93a575696e7438 91ce00020000 00 ", count) + refTree + nonceHex
	b := build(header, data)
	var before, after testingMem
	before.read()
	_, err := frame.Decode(b)
	after.read()
	if !errors.Is(err, frame.ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	if got := after.bytes - before.bytes; got > 1<<20 {
		t.Fatalf("refusing a %d-byte frame allocated %d bytes", len(b), got)
	}
}

// A reference whose nonce is not this frame's is a literal, whatever its index.
func TestForeignNonceIsLiteral(t *testing.T) {
	b := build("93 91 93a5696e743634 9101 00 c417 c7142a ffffffffffffffffffffffffffffffff 09000000"+nonceHex, 8)
	v, err := frame.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := v.(wire.Ext); !ok || e.Code != 42 || len(e.Data) != 20 {
		t.Fatalf("got %#v, want a literal ext 42", v)
	}
}

// A misaligned offset is accepted if it is in bounds (the reference only
// checks bounds).
func TestMisalignedOffsetInBounds(t *testing.T) {
	b := build("93 91 93a5696e743136 9101 03 "+refTree+nonceHex, 8)
	copy(b[len(b)-8+3:], []byte{0x34, 0x12})
	v, err := frame.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if x := v.(*tensor.Tensor); x.DType != tensor.Int16 || x.Data[0] != 0x34 || x.Data[1] != 0x12 {
		t.Fatalf("got %v %x", x, x.Data)
	}
}

// TestQuickHeaderAgrees: the header's quick reader takes the headers
// Prepare writes for small frames, and wherever it takes one (those, each
// of them with any one byte changed or cut short, integers in every width)
// its result is the full reader's.
func TestQuickHeaderAgrees(t *testing.T) {
	var frames [][]byte
	for _, shape := range [][]int{{}, {0}, {1}, {127}, {128, 2}, {255, 1, 1}, {256}, {3, 5, 7, 2}} {
		x, err := tensor.Zeros(tensor.Float32, shape...)
		if err != nil {
			t.Fatal(err)
		}
		y, _ := tensor.Zeros(tensor.Uint8, 3)
		for _, v := range []any{map[string]any{"data": x}, []any{x, y, map[string]any{"k": x}}} {
			_, b := encode(t, v, 0)
			if quick, err := frame.HeaderPathsAgree(b); !quick || err != nil {
				t.Fatalf("shape %v: Prepare's header not taken by the quick reader (%v) or read differently: %v", shape, quick, err)
			}
			frames = append(frames, b)
		}
	}
	// Integers in every width, and a bin16 tree, written by hand.
	frames = append(frames,
		build("93 91 93a5696e743634 91cc01 cd0000 c5001a"+refTree[4:]+nonceHex, 8),
		build("93 91 93a5696e743634 91ce00000001 cc00 "+refTree+nonceHex, 8),
		build("93 91 93a5696e743634 91d001 00 "+refTree+nonceHex, 8), // signed: the full reader's
		build("93 91 93a5696e743634 9101 00 "+refTree+nonceHex, 1<<20))
	for _, good := range frames {
		n := 4 + int(binary.LittleEndian.Uint32(good))
		for i := 4; i < n; i++ {
			for _, c := range []byte{0x00, 0x01, 0x7f, 0x80, 0x90, 0x93, 0xa5, 0xc4, 0xc5, 0xcc, 0xce, 0xcf, 0xd0, 0xff, good[i] + 1, good[i] - 1} {
				b := append([]byte(nil), good...)
				b[i] = c
				if _, err := frame.HeaderPathsAgree(b); err != nil {
					t.Fatalf("byte %d of %x set to %#x: %v", i, good[:n], c, err)
				}
			}
			cut := append([]byte(nil), good...)
			binary.LittleEndian.PutUint32(cut, uint32(i-4))
			if _, err := frame.HeaderPathsAgree(cut); err != nil {
				t.Fatalf("%x cut to %d header bytes: %v", good[:n], i-4, err)
			}
		}
	}
}
