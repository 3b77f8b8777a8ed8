//go:build linux && !amd64

package demo

// hasPCM16x8 is false: no vector kernel here.
const hasPCM16x8 = false

// pcm16Blocks converts no samples: pcm16Scalar does them all.
func pcm16Blocks(out []byte, x []float32) int { return 0 }
