package connector

import (
	"encoding/binary"
	"math"
	"strconv"
)

func putFloat32(b []byte, f float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(f)) }
func putFloat64(b []byte, f float64) { binary.LittleEndian.PutUint64(b, math.Float64bits(f)) }
func itoa(i int) string              { return strconv.Itoa(i) }
