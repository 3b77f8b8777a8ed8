//go:build linux

#include "textflag.h"

// 32767.0 and -32767.0 as float64 bits.
DATA pcmMax<>+0(SB)/8, $0x40dfffc000000000
GLOBL pcmMax<>(SB), RODATA|NOPTR, $8
DATA pcmMin<>+0(SB)/8, $0xc0dfffc000000000
GLOBL pcmMin<>(SB), RODATA|NOPTR, $8

// func pcm16x8(dst *byte, src *float32, blocks int)
//
// Per four samples, in float64 as pcm16Scalar: widen, scale by 32767
// (exact), clamp to ±32767 with the sample as the instructions' second
// source (a NaN passes through), zero the NaNs, convert rounding to
// nearest even (MXCSR's default, which Go keeps), then pack eight int32s
// to int16s (in range, so no saturation happens).
TEXT ·pcm16x8(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+16(FP), CX
	VBROADCASTSD pcmMax<>(SB), Y15
	VBROADCASTSD pcmMin<>(SB), Y14

loop:
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y1
	VMULPD    Y15, Y0, Y0
	VMULPD    Y15, Y1, Y1
	VMAXPD    Y0, Y14, Y0
	VMAXPD    Y1, Y14, Y1
	VMINPD    Y0, Y15, Y0
	VMINPD    Y1, Y15, Y1
	VCMPPD    $7, Y0, Y0, Y2 // ordered: all ones but for a NaN
	VCMPPD    $7, Y1, Y1, Y3
	VANDPD    Y2, Y0, Y0
	VANDPD    Y3, Y1, Y1
	VCVTPD2DQY Y0, X0
	VCVTPD2DQY Y1, X1
	VPACKSSDW X1, X0, X0
	VMOVDQU   X0, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       loop

	VZEROUPPER
	RET
