#include "textflag.h"
#include "hsum_amd64.h"

// The float32 normalization kernels of LayerNormalization and
// RMSNormalization (package ops, layernorm.go, rmsnorm.go): a row's moments
// (or sum of squares), then the normalized row, 16 lanes at a time (n a
// multiple of 16).

// func SumSquaresF64(x *float32, n int) float64
// Σx² over any n ≥ 0 in float64: every element widened (exactly) and its
// square added with a fused multiply-add, element i into lane i mod 8 of
// accumulator (i/8) mod 4 for the whole 32-element blocks, then 8-element
// vectors into accumulator 0, then the last n mod 8 elements under a mask
// into accumulator 1 (the lanes past n neither read nor added).
TEXT ·SumSquaresF64(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Z0, Z0, Z0
	VXORPD Z1, Z1, Z1
	VXORPD Z2, Z2, Z2
	VXORPD Z3, Z3, Z3
	MOVQ CX, DX
	SHRQ $5, DX
	JZ sdvec
sdloop:
	VCVTPS2PD (SI), Z4
	VFMADD231PD Z4, Z4, Z0
	VCVTPS2PD 32(SI), Z5
	VFMADD231PD Z5, Z5, Z1
	VCVTPS2PD 64(SI), Z6
	VFMADD231PD Z6, Z6, Z2
	VCVTPS2PD 96(SI), Z7
	VFMADD231PD Z7, Z7, Z3
	ADDQ $128, SI
	DECQ DX
	JNZ sdloop
sdvec:
	MOVQ CX, DX
	ANDQ $31, DX
	SHRQ $3, DX
	JZ sdtail
sdvloop:
	VCVTPS2PD (SI), Z4
	VFMADD231PD Z4, Z4, Z0
	ADDQ $32, SI
	DECQ DX
	JNZ sdvloop
sdtail:
	ANDQ $7, CX
	JZ sdsum
	MOVL $1, DX
	SHLL CX, DX
	DECL DX
	KMOVW DX, K1
	VCVTPS2PD.Z (SI), K1, Z4
	VFMADD231PD Z4, Z4, Z1
sdsum:
	VADDPD Z1, Z0, Z0
	VADDPD Z3, Z2, Z2
	VADDPD Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPD Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0
	MOVSD X0, ret+16(FP)
	VZEROUPPER
	RET

// func RowMoments16(x *float32, n int) (mean, sd, m2 float32)
// mean = Σx/n in float32, then sd = Σ(mean - x) and m2 = Σ(mean - x)²,
// each pass with four 16-lane accumulators per sum (64 partial sums). The
// caller corrects the rounded mean with sd (see NormRow16).
TEXT ·RowMoments16(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	MOVQ SI, DI
	MOVQ CX, DX
	SHRQ $6, DX
	JZ m1tail
m1loop:
	VADDPS (DI), Z0, Z0
	VADDPS 64(DI), Z1, Z1
	VADDPS 128(DI), Z2, Z2
	VADDPS 192(DI), Z3, Z3
	ADDQ $256, DI
	DECQ DX
	JNZ m1loop
m1tail:
	MOVQ CX, DX
	ANDQ $63, DX
	SHRQ $4, DX
	JZ m1sum
m1tl:
	VADDPS (DI), Z0, Z0
	ADDQ $64, DI
	DECQ DX
	JNZ m1tl
m1sum:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM16(Z0, Y0, X0, Y1, X1)
	CVTSQ2SS CX, X5
	VDIVSS X5, X0, X0
	VBROADCASTSS X0, Z6
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13
	VXORPS Z14, Z14, Z14
	MOVQ SI, DI
	MOVQ CX, DX
	SHRQ $6, DX
	JZ m2tail
m2loop:
	VSUBPS (DI), Z6, Z7
	VADDPS Z7, Z11, Z11
	VFMADD231PS Z7, Z7, Z1
	VSUBPS 64(DI), Z6, Z8
	VADDPS Z8, Z12, Z12
	VFMADD231PS Z8, Z8, Z2
	VSUBPS 128(DI), Z6, Z9
	VADDPS Z9, Z13, Z13
	VFMADD231PS Z9, Z9, Z3
	VSUBPS 192(DI), Z6, Z10
	VADDPS Z10, Z14, Z14
	VFMADD231PS Z10, Z10, Z4
	ADDQ $256, DI
	DECQ DX
	JNZ m2loop
m2tail:
	MOVQ CX, DX
	ANDQ $63, DX
	SHRQ $4, DX
	JZ m2sum
m2tl:
	VSUBPS (DI), Z6, Z7
	VADDPS Z7, Z11, Z11
	VFMADD231PS Z7, Z7, Z1
	ADDQ $64, DI
	DECQ DX
	JNZ m2tl
m2sum:
	VADDPS Z2, Z1, Z1
	VADDPS Z4, Z3, Z3
	VADDPS Z3, Z1, Z1
	HSUM16(Z1, Y1, X1, Y2, X2)
	VADDPS Z12, Z11, Z11
	VADDPS Z14, Z13, Z13
	VADDPS Z13, Z11, Z11
	HSUM16(Z11, Y11, X11, Y2, X2)
	MOVSS X0, mean+16(FP)
	MOVSS X11, sd+20(FP)
	MOVSS X1, m2+24(FP)
	VZEROUPPER
	RET

// func NormRow16(y, x *float32, n int, mu, delta, inv float32, scale, bias *float32)
// y = ((x - mu) + delta)·inv·scale + bias: mu the float32 mean, delta
// its correction (x - mu is exact for x near mu, so the small difference
// keeps its digits however far the row is from zero).
TEXT ·NormRow16(SB), NOSPLIT, $0-56
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS mu+24(FP), Z0
	VBROADCASTSS delta+28(FP), Z4
	VBROADCASTSS inv+32(FP), Z1
	MOVQ scale+40(FP), R8
	MOVQ bias+48(FP), R9
	SHRQ $4, CX
	JZ nrdone
nrloop:
	VMOVUPS (SI), Z2
	VSUBPS Z0, Z2, Z2
	VADDPS Z4, Z2, Z2
	VMULPS Z1, Z2, Z2
	VMOVUPS (R9), Z3
	VFMADD231PS (R8), Z2, Z3
	VMOVUPS Z3, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, R8
	ADDQ $64, R9
	DECQ CX
	JNZ nrloop
nrdone:
	VZEROUPPER
	RET

// func SumSquares16(x *float32, n int) float32
// Σx² with four 16-lane accumulators (64 partial sums), n a multiple of 16.
TEXT ·SumSquares16(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	MOVQ CX, DX
	SHRQ $6, DX
	JZ sstail
ssloop:
	VMOVUPS (SI), Z4
	VFMADD231PS Z4, Z4, Z0
	VMOVUPS 64(SI), Z5
	VFMADD231PS Z5, Z5, Z1
	VMOVUPS 128(SI), Z6
	VFMADD231PS Z6, Z6, Z2
	VMOVUPS 192(SI), Z7
	VFMADD231PS Z7, Z7, Z3
	ADDQ $256, SI
	DECQ DX
	JNZ ssloop
sstail:
	ANDQ $63, CX
	SHRQ $4, CX
	JZ sssum
sstl:
	VMOVUPS (SI), Z4
	VFMADD231PS Z4, Z4, Z0
	ADDQ $64, SI
	DECQ CX
	JNZ sstl
sssum:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM16(Z0, Y0, X0, Y1, X1)
	MOVSS X0, ret+16(FP)
	VZEROUPPER
	RET
