//go:build linux

package demo

import "golang.org/x/sys/cpu"

// pcm16Block is the samples pcm16x8 converts at a time.
const pcm16Block = 8

// hasPCM16x8 reports whether this CPU runs pcm16x8 (AVX2).
var hasPCM16x8 = cpu.X86.HasAVX2

// pcm16Blocks converts the whole blocks of x that fit out, as pcm16Scalar
// would, and returns how many samples it converted. Stage 2 converts every
// chunk it receives: sample by sample that took 5.4 µs a chunk on the
// project's 2-core VM (BenchmarkPCM16), and a demo without it streamed a
// quarter more chunks a second; eight at a time it takes 0.6 µs.
func pcm16Blocks(out []byte, x []float32) int {
	blocks := min(len(x), len(out)/2) / pcm16Block
	if !hasPCM16x8 || blocks == 0 {
		return 0
	}
	pcm16x8(&out[0], &x[0], blocks)
	return blocks * pcm16Block
}

// pcm16x8 writes blocks×8 samples of src to dst as pcm16Scalar does:
// 16 bytes of dst per 8 float32s of src. It needs AVX2, and blocks > 0.
//
//go:noescape
func pcm16x8(dst *byte, src *float32, blocks int)
