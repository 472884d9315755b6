#include "textflag.h"

// The float32 Add, Sub, Mul and Div kernels of package ops (binary_f32.go):
// dst = a op b over n elements (any n ≥ 0), 64 at a time, then 16 at a
// time, then the last n mod 16 under a mask (masked loads do not fault
// past the end, masked stores write nothing there). Every lane rounds as
// Go's scalar float32 operation does (VADDPS/VSUBPS/VMULPS/VDIVPS, default
// MXCSR: round to nearest even, no flush to zero, subnormals kept).
//
// NaN payloads: with two NaN operands x86 returns the first source's NaN
// (quieted). Go's compiler emits ADDSS/MULSS with the element loaded from
// memory as the first source (a[i] in vv and vs, b[i] in sv) and SUBSS/DIVSS
// with the left operand first; the kernels keep the same operand as the
// first source, so even the payloads match (TestArithFloat32 in ops).
//
// Registers: DI dst, SI the vector operand (a; b for the sv kernels), DX b
// (vv), CX n, Z0 the broadcast scalar (vs, sv).

// ARITH_LOOPS runs the kernel: 4 STEPs (16 lanes each, in registers Z1-Z4)
// at a time while 64 elements remain, then single STEPs, then TAIL under
// the mask K1 of the last n mod 16 lanes. ADV(bytes) moves the operand and
// output pointers on.
#define ARITH_LOOPS(OP, STEP, TAIL, ADV) \
	MOVQ CX, AX; \
	SHRQ $6, AX; \
	JZ   l16; \
l64: \
	STEP(OP, 0, Z1); \
	STEP(OP, 64, Z2); \
	STEP(OP, 128, Z3); \
	STEP(OP, 192, Z4); \
	ADV($256); \
	DECQ AX; \
	JNZ  l64; \
l16: \
	MOVQ CX, AX; \
	ANDQ $63, AX; \
	SHRQ $4, AX; \
	JZ   ltail; \
l16loop: \
	STEP(OP, 0, Z1); \
	ADV($64); \
	DECQ AX; \
	JNZ  l16loop; \
ltail: \
	ANDQ  $15, CX; \
	JZ    ldone; \
	MOVQ  $1, AX; \
	SHLQ  CX, AX; \
	DECQ  AX; \
	KMOVW AX, K1; \
	TAIL(OP); \
ldone: \
	VZEROUPPER

// VV: Z = a[i] op b[i]; a (SI) is the first source, b at DX.
#define VV_STEP(OP, off, Z) \
	VMOVUPS off(SI), Z; \
	OP      off(DX), Z, Z; \
	VMOVUPS Z, off(DI)
#define VV_TAIL(OP) \
	VMOVUPS.Z (SI), K1, Z1; \
	OP        (DX), Z1, K1, Z1; \
	VMOVUPS   Z1, K1, (DI)
#define VV_ADV(bytes) \
	ADDQ bytes, SI; \
	ADDQ bytes, DX; \
	ADDQ bytes, DI

// VS: Z = v[i] op s, the vector element (at SI) the first source, s in Z0.
#define VS_STEP(OP, off, Z) \
	VMOVUPS off(SI), Z; \
	OP      Z0, Z, Z; \
	VMOVUPS Z, off(DI)
#define VS_TAIL(OP) \
	VMOVUPS.Z (SI), K1, Z1; \
	OP        Z0, Z1, K1, Z1; \
	VMOVUPS   Z1, K1, (DI)
#define V_ADV(bytes) \
	ADDQ bytes, SI; \
	ADDQ bytes, DI

// SV: Z = s op v[i], the scalar s (Z0) the first source, v at SI.
#define SV_STEP(OP, off, Z) \
	OP      off(SI), Z0, Z; \
	VMOVUPS Z, off(DI)
#define SV_TAIL(OP) \
	OP      (SI), Z0, K1, Z1; \
	VMOVUPS Z1, K1, (DI)

// ARITH_FUNC defines the kernel NAME: ARGS loads the arguments into the
// registers above, then ARITH_LOOPS runs with the form's STEP, TAIL, ADV.
#define ARITH_FUNC(NAME, OP, ARGS, STEP, TAIL, ADV) \
TEXT NAME(SB), NOSPLIT, $0-32; \
	ARGS; \
	MOVQ n+24(FP), CX; \
	ARITH_LOOPS(OP, STEP, TAIL, ADV); \
	RET

#define VV_ARGS \
	MOVQ dst+0(FP), DI; \
	MOVQ a+8(FP), SI; \
	MOVQ b+16(FP), DX
#define VS_ARGS \
	MOVQ dst+0(FP), DI; \
	MOVQ a+8(FP), SI; \
	VBROADCASTSS b+16(FP), Z0
#define SV_ARGS \
	MOVQ dst+0(FP), DI; \
	VBROADCASTSS a+8(FP), Z0; \
	MOVQ b+16(FP), SI

// func AddVV(dst, a, b *float32, n int) and the like.
ARITH_FUNC(·AddVV, VADDPS, VV_ARGS, VV_STEP, VV_TAIL, VV_ADV)
ARITH_FUNC(·SubVV, VSUBPS, VV_ARGS, VV_STEP, VV_TAIL, VV_ADV)
ARITH_FUNC(·MulVV, VMULPS, VV_ARGS, VV_STEP, VV_TAIL, VV_ADV)
ARITH_FUNC(·DivVV, VDIVPS, VV_ARGS, VV_STEP, VV_TAIL, VV_ADV)

// func AddVS(dst, a *float32, b float32, n int) and the like.
ARITH_FUNC(·AddVS, VADDPS, VS_ARGS, VS_STEP, VS_TAIL, V_ADV)
ARITH_FUNC(·SubVS, VSUBPS, VS_ARGS, VS_STEP, VS_TAIL, V_ADV)
ARITH_FUNC(·MulVS, VMULPS, VS_ARGS, VS_STEP, VS_TAIL, V_ADV)
ARITH_FUNC(·DivVS, VDIVPS, VS_ARGS, VS_STEP, VS_TAIL, V_ADV)

// func SubSV(dst *float32, a float32, b *float32, n int) and DivSV.
ARITH_FUNC(·SubSV, VSUBPS, SV_ARGS, SV_STEP, SV_TAIL, V_ADV)
ARITH_FUNC(·DivSV, VDIVPS, SV_ARGS, SV_STEP, SV_TAIL, V_ADV)

// func AddRow32(dst, src, row *float32, rows int): dst's rows of 32 floats
// are src's plus row's 32 (VADDPS: src the first source).
TEXT ·AddRow32(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    row+16(FP), DX
	MOVQ    rows+24(FP), CX
	TESTQ   CX, CX
	JLE     addrow_done
	VMOVUPS (DX), Z0
	VMOVUPS 64(DX), Z1

addrow_loop:
	VMOVUPS (SI), Z2
	VMOVUPS 64(SI), Z3
	VADDPS  Z0, Z2, Z2
	VADDPS  Z1, Z3, Z3
	VMOVUPS Z2, (DI)
	VMOVUPS Z3, 64(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	DECQ    CX
	JNZ     addrow_loop
	VZEROUPPER

addrow_done:
	RET
