#include "textflag.h"
#include "tail_amd64.h"

// The float32 Sigmoid and Tanh kernels (package ops, sigmoid.go):
// 1/(1 + e^-x), and tanh x = 1 - 2/(e^2|x| + 1) (signed) past |x| = 0.625,
// Cephes' odd polynomial below it; e^z by a two-constant reduction
// z = n·ln2 + r (|r| ≤ ln2/2) and the fused attention's polynomial for e^r,
// scaled by 2^n.
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

// EXP_POLY(Z, N, P): P = e^Z (Z is overwritten with the reduced r, N with
// n): n = round(Z·log2 e), r = Z - n·ln2 (two constants), e^r by the
// polynomial, scaled by 2^n. Z19 log2(e), Z20 and Z21 ln2's parts, Z22 1,
// Z23 q4; BX sigk<>.
#define EXP_POLY(Z, N, P) \
	VMULPS Z19, Z, N; \
	VRNDSCALEPS $8, N, N; \
	VFNMADD231PS Z20, N, Z; \
	VFNMADD231PS Z21, N, Z; \
	VMOVAPS Z23, P; \
	VFMADD213PS.BCST 32(BX), Z, P; \
	VFMADD213PS.BCST 36(BX), Z, P; \
	VFMADD213PS.BCST 40(BX), Z, P; \
	VFMADD213PS.BCST 44(BX), Z, P; \
	VFMADD213PS Z22, Z, P; \
	VSCALEFPS N, P, P

// EXP_POLY_CONSTS loads EXP_POLY's constants from BX (sigk<>): Z19
// log2(e), Z20 and Z21 ln2's parts, Z22 1, Z23 q4.
#define EXP_POLY_CONSTS \
	VBROADCASTSS 12(BX), Z19; \
	VBROADCASTSS 16(BX), Z20; \
	VBROADCASTSS 20(BX), Z21; \
	VBROADCASTSS 24(BX), Z22; \
	VBROADCASTSS 28(BX), Z23

// SIGMOID_CONSTS loads BX (sigk<>), SIGMOID's constants Z16 (sign bit),
// Z17 and Z18 (the clamps) and EXP_POLY's.
#define SIGMOID_CONSTS \
	LEAQ sigk<>(SB), BX; \
	VBROADCASTSS 0(BX), Z16; \
	VBROADCASTSS 4(BX), Z17; \
	VBROADCASTSS 8(BX), Z18; \
	EXP_POLY_CONSTS

// SIGMOID(X, Z, N, P): P = 1/(1 + e^-X), Z and N scratch (Z may be X).
#define SIGMOID(X, Z, N, P) \
	VXORPS Z16, X, Z; \
	VMINPS Z, Z17, Z; \
	VMAXPS Z, Z18, Z; \
	EXP_POLY(Z, N, P); \
	VADDPS Z22, P, P; \
	VDIVPS P, Z22, P

// func Sigmoid16(dst, src *float32, n int)
// dst = 1/(1 + e^-src) for n elements (any n: TAIL_START). The clamps
// keep NaN (VMINPS/VMAXPS return their second source, the value, on NaN),
// so NaN stays NaN; -Inf gives 0 and +Inf 1.
TEXT ·Sigmoid16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SIGMOID_CONSTS
	TAIL_START(sgtail)
sgloop:
	VMOVUPS (SI), Z1
sgbody:
	SIGMOID(Z1, Z1, Z2, Z3)
	VMOVUPS Z3, K7, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ sgloop
sgtail:
	TAIL_NEXT(sgbody, sgdone, Z1)
sgdone:
	VZEROUPPER
	RET

// func Silu16(dst, src *float32, n int)
// dst = x·σ(x), x = src, for n elements (any n: TAIL_START): Sigmoid16's
// σ, rounded to float32 as Sigmoid16 stores it, then one float32 multiply
// by x (x the first operand), so each element is bit for bit Sigmoid16
// followed by a float32 Mul(x, σ). NaN stays NaN; -Inf gives NaN (-Inf·0),
// as the two steps do.
TEXT ·Silu16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SIGMOID_CONSTS
	TAIL_START(sitail)
siloop:
	VMOVUPS (SI), Z0
sibody:
	SIGMOID(Z0, Z1, Z2, Z3)
	VMULPS Z3, Z0, Z3
	VMOVUPS Z3, K7, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ siloop
sitail:
	TAIL_NEXT(sibody, sidone, Z0)
sidone:
	VZEROUPPER
	RET

DATA tanhk<>+0(SB)/4, $0x7fffffff  // |x| mask
DATA tanhk<>+4(SB)/4, $0x42b00000  // 88: e^2|x| stays finite; tanh is ±1 in float32 long before
DATA tanhk<>+8(SB)/4, $0x3f200000  // 0.625: the polynomial below it
DATA tanhk<>+12(SB)/4, $0x40000000 // 2
DATA tanhk<>+16(SB)/4, $0xbbbaf0ea // p4..p0: tanh x = x + x·z·P(z), z = x², on |x| < 0.625
DATA tanhk<>+20(SB)/4, $0x3ca9134e
DATA tanhk<>+24(SB)/4, $0xbd5c1e2d
DATA tanhk<>+28(SB)/4, $0x3e088393
DATA tanhk<>+32(SB)/4, $0xbeaaaa99
GLOBL tanhk<>(SB), RODATA|NOPTR, $36

// func Tanh16(dst, src *float32, n int)
// dst = tanh(src) for n elements (any n: TAIL_START); NaN stays NaN, ±Inf
// give ±1.
TEXT ·Tanh16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	LEAQ sigk<>(SB), BX
	LEAQ tanhk<>(SB), R8
	VBROADCASTSS 0(BX), Z16   // sign bit
	EXP_POLY_CONSTS
	VBROADCASTSS 0(R8), Z24   // |x| mask
	VBROADCASTSS 4(R8), Z25   // 88
	VBROADCASTSS 8(R8), Z26   // 0.625
	VBROADCASTSS 12(R8), Z27  // 2
	TAIL_START(thtail)
thloop:
	VMOVUPS (SI), Z0
thbody:
	VANDPS Z24, Z0, Z1        // a = |x|
	VANDPS Z16, Z0, Z11       // x's sign
	VCMPPS $0x11, Z26, Z1, K1 // a < 0.625 (ordered): the polynomial
	// past 0.625: 1 - 2/(e^z + 1), z = min(2a, 88) (NaN kept)
	VADDPS Z1, Z1, Z2
	VMINPS Z2, Z25, Z2
	EXP_POLY(Z2, Z3, Z4)      // e^z
	VADDPS Z22, Z4, Z4
	VDIVPS Z4, Z27, Z4        // 2/(e^z + 1)
	VSUBPS Z4, Z22, Z4        // 1 - that
	VORPS Z11, Z4, Z4         // x's sign
	// below 0.625: x + x·z·P(z), z = x²
	VMULPS Z0, Z0, Z5
	VBROADCASTSS 16(R8), Z6
	VFMADD213PS.BCST 20(R8), Z5, Z6
	VFMADD213PS.BCST 24(R8), Z5, Z6
	VFMADD213PS.BCST 28(R8), Z5, Z6
	VFMADD213PS.BCST 32(R8), Z5, Z6
	VMULPS Z0, Z5, Z7         // x·z
	VFMADD213PS Z0, Z7, Z6    // x + x·z·P
	VBLENDMPS Z6, Z4, K1, Z8
	VMOVUPS Z8, K7, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ thloop
thtail:
	TAIL_NEXT(thbody, thdone, Z0)
thdone:
	VZEROUPPER
	RET

DATA geluk<>+0(SB)/4, $0xbfcc422a // -2·√(2/π)
DATA geluk<>+4(SB)/4, $0xbd922279 // -2·√(2/π)·0.044715
GLOBL geluk<>(SB), RODATA|NOPTR, $8

// func GeluTanh16(dst, src *float32, n int)
// dst = x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))), x = src, for n
// elements (any n: TAIL_START), as x·σ(2u) = x/(1 + e^z) with z = -2u =
// x·(a + b·x²) (a = -2√(2/π), b = 0.044715·a): one pass, e^z as Sigmoid16
// takes it (z clamped to [-104, 100]: past 100 e^z is +Inf and the result
// ±0, below -104 it is 0 and the result x). NaN stays NaN; +Inf gives
// +Inf and -Inf NaN, as the tanh form does (-Inf·0).
TEXT ·GeluTanh16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	LEAQ sigk<>(SB), BX
	LEAQ geluk<>(SB), R8
	VBROADCASTSS 4(BX), Z17   // 100
	VBROADCASTSS 8(BX), Z18   // -104
	EXP_POLY_CONSTS
	VBROADCASTSS 0(R8), Z24   // a
	VBROADCASTSS 4(R8), Z25   // b
	TAIL_START(gttail)
gtloop:
	VMOVUPS (SI), Z0
gtbody:
	VMULPS Z0, Z0, Z1         // x²
	VFMADD213PS Z24, Z25, Z1  // a + b·x²
	VMULPS Z0, Z1, Z1         // z = x·(a + b·x²)
	VMINPS Z1, Z17, Z1
	VMAXPS Z1, Z18, Z1
	EXP_POLY(Z1, Z2, Z3)      // e^z
	VADDPS Z22, Z3, Z3
	VDIVPS Z3, Z0, Z3         // x/(1 + e^z)
	VMOVUPS Z3, K7, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ gtloop
gttail:
	TAIL_NEXT(gtbody, gtdone, Z0)
gtdone:
	VZEROUPPER
	RET
