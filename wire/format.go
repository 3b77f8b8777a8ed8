package wire

import (
	"encoding/binary"
	"math"
)

// msgpack type bytes (the msgpack specification; msgspec writes the smallest
// form of each, which is what these appenders do too).
const (
	codeNil     = 0xc0
	codeFalse   = 0xc2
	codeTrue    = 0xc3
	codeBin8    = 0xc4
	codeBin16   = 0xc5
	codeBin32   = 0xc6
	codeExt8    = 0xc7
	codeExt16   = 0xc8
	codeExt32   = 0xc9
	codeFloat32 = 0xca
	codeFloat64 = 0xcb
	codeUint8   = 0xcc
	codeUint16  = 0xcd
	codeUint32  = 0xce
	codeUint64  = 0xcf
	codeInt8    = 0xd0
	codeInt16   = 0xd1
	codeInt32   = 0xd2
	codeInt64   = 0xd3
	codeFixExt1 = 0xd4
	codeFixExt2 = 0xd5
	codeFixExt4 = 0xd6
	codeFixExt8 = 0xd7
	codeFixE16  = 0xd8
	codeStr8    = 0xd9
	codeStr16   = 0xda
	codeStr32   = 0xdb
	codeArray16 = 0xdc
	codeArray32 = 0xdd
	codeMap16   = 0xde
	codeMap32   = 0xdf

	fixMap   = 0x80
	fixArray = 0x90
	fixStr   = 0xa0
)

func appendNil(b []byte) []byte { return append(b, codeNil) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, codeTrue)
	}
	return append(b, codeFalse)
}

// AppendInt appends v in its smallest msgpack form; non-negative values
// take the unsigned forms, like msgspec.
func AppendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return appendUint(b, uint64(v))
	}
	switch {
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, codeInt8, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, codeInt16), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, codeInt32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, codeInt64), uint64(v))
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, codeUint8, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, codeUint16), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, codeUint32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, codeUint64), v)
}

// appendFloat writes float64 always: Python floats are doubles.
func appendFloat(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, codeFloat64), math.Float64bits(v))
}

func appendStringHeader(b []byte, n int) []byte {
	switch {
	case n < 32:
		return append(b, fixStr|byte(n))
	case n <= math.MaxUint8:
		return append(b, codeStr8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, codeStr16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, codeStr32), uint32(n))
}

// AppendString appends s as a msgpack str (the frame codec writes its
// descriptors with it, SPEC §4).
func AppendString(b []byte, s string) []byte {
	return append(appendStringHeader(b, len(s)), s...)
}

// AppendBinHeader appends the header of a msgpack bin of n bytes; the frame
// codec (SPEC §4) uses it to write its header straight into the destination.
func AppendBinHeader(b []byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(b, codeBin8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, codeBin16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, codeBin32), uint32(n))
}

func appendBin(b []byte, v []byte) []byte {
	return append(AppendBinHeader(b, len(v)), v...)
}

// AppendArrayHeader appends the header of a msgpack array of n elements.
func AppendArrayHeader(b []byte, n int) []byte {
	return appendContainerHeader(b, n, fixArray, codeArray16)
}

func appendMapHeader(b []byte, n int) []byte {
	return appendContainerHeader(b, n, fixMap, codeMap16)
}

// appendContainerHeader writes an array's or map's header in its smallest
// form: fix|n, code16 with a u16, or the 32-bit code (code16+1) with a u32.
func appendContainerHeader(b []byte, n int, fix, code16 byte) []byte {
	switch {
	case n < 16:
		return append(b, fix|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, code16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, code16+1), uint32(n))
}

func appendExt(b []byte, code int8, data []byte) []byte {
	switch n := len(data); {
	case n == 1:
		b = append(b, codeFixExt1)
	case n == 2:
		b = append(b, codeFixExt2)
	case n == 4:
		b = append(b, codeFixExt4)
	case n == 8:
		b = append(b, codeFixExt8)
	case n == 16:
		b = append(b, codeFixE16)
	case n <= math.MaxUint8:
		b = append(b, codeExt8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, codeExt16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, codeExt32), uint32(n))
	}
	return append(append(b, byte(code)), data...)
}
