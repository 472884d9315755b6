#include "textflag.h"

// The float32 Sigmoid kernel (package ops, sigmoid.go): 1/(1 + e^-x), with
// e^z by a two-constant reduction z = n·ln2 + r (|r| ≤ ln2/2) and the
// fused attention's polynomial for e^r, scaled by 2^n.
DATA sigk<>+0(SB)/4, $0x80000000  // sign bit
DATA sigk<>+4(SB)/4, $0x42c80000  // 100: e^z past 2^128 overflows to +Inf (σ → 0)
DATA sigk<>+8(SB)/4, $0xc2d00000  // -104: e^z below it is 0 (σ → 1)
DATA sigk<>+12(SB)/4, $0x3fb8aa3b // log2(e)
DATA sigk<>+16(SB)/4, $0x3f318000 // ln2, high part (0.693359375, exact times any n)
DATA sigk<>+20(SB)/4, $0xb95e8083 // ln2 - high part (-2.1219444e-4)
DATA sigk<>+24(SB)/4, $0x3f800000 // 1
DATA sigk<>+28(SB)/4, $0x3c07d3e8 // q4..q0: e^r = 1 + r·Σ q_k·r^k on |r| ≤ ln2/2
DATA sigk<>+32(SB)/4, $0x3d2b9d69
DATA sigk<>+36(SB)/4, $0x3e2aad37
DATA sigk<>+40(SB)/4, $0x3efffee2
DATA sigk<>+44(SB)/4, $0x3f7ffffb
GLOBL sigk<>(SB), RODATA|NOPTR, $48

// func Sigmoid16(dst, src *float32, n int)
// dst = 1/(1 + e^-src) for n elements (n a multiple of 16). The clamps
// keep NaN (VMINPS/VMAXPS return their second source, the value, on NaN),
// so NaN stays NaN; -Inf gives 0 and +Inf 1.
TEXT ·Sigmoid16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	LEAQ sigk<>(SB), BX
	VBROADCASTSS 0(BX), Z16
	VBROADCASTSS 4(BX), Z17
	VBROADCASTSS 8(BX), Z18
	VBROADCASTSS 12(BX), Z19
	VBROADCASTSS 16(BX), Z20
	VBROADCASTSS 20(BX), Z21
	VBROADCASTSS 24(BX), Z22
	VBROADCASTSS 28(BX), Z23
	SHRQ $4, CX
	JZ sgdone
sgloop:
	VMOVUPS (SI), Z1
	VXORPS Z16, Z1, Z1
	VMINPS Z1, Z17, Z1
	VMAXPS Z1, Z18, Z1
	VMULPS Z19, Z1, Z2
	VRNDSCALEPS $8, Z2, Z2
	VFNMADD231PS Z20, Z2, Z1
	VFNMADD231PS Z21, Z2, Z1
	VMOVAPS Z23, Z3
	VFMADD213PS.BCST 32(BX), Z1, Z3
	VFMADD213PS.BCST 36(BX), Z1, Z3
	VFMADD213PS.BCST 40(BX), Z1, Z3
	VFMADD213PS.BCST 44(BX), Z1, Z3
	VFMADD213PS Z22, Z1, Z3
	VSCALEFPS Z2, Z3, Z3
	VADDPS Z22, Z3, Z3
	VDIVPS Z3, Z22, Z3
	VMOVUPS Z3, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ sgloop
sgdone:
	VZEROUPPER
	RET
