#include "textflag.h"
#include "tail_amd64.h"

// The float32 Sin and Cos kernels (package ops, sincos.go): x = k·π/2 + r
// with |r| ≤ π/4 by a three-constant reduction (each product exact in its
// FMA), then Cephes' minimax polynomials for sin r and cos r, chosen and
// signed by the quadrant k mod 4 (cos x = sin(x + π/2): quadrant k + 1).
DATA sck<>+0(SB)/4, $0x3f22f983  // 2/π
DATA sck<>+4(SB)/4, $0x3fc90fdb  // π/2 = p1 + p2 + p3
DATA sck<>+8(SB)/4, $0xb33bbd2e  // p2
DATA sck<>+12(SB)/4, $0xa6f72ced // p3
DATA sck<>+16(SB)/4, $0xbe2aaaa3 // s1..s3: sin r = r + r³·(s1 + r²·(s2 + r²·s3))
DATA sck<>+20(SB)/4, $0x3c08839e
DATA sck<>+24(SB)/4, $0xb94ca1f9
DATA sck<>+28(SB)/4, $0x3d2aaaa5 // c1..c3: cos r = 1 - r²/2 + r⁴·(c1 + r²·(c2 + r²·c3))
DATA sck<>+32(SB)/4, $0xbab6061a
DATA sck<>+36(SB)/4, $0x37ccf5ce
DATA sck<>+40(SB)/4, $0x3f000000 // 0.5
DATA sck<>+44(SB)/4, $0x3f800000 // 1
DATA sck<>+48(SB)/4, $0x49742400 // 1e6: past it the reduction loses digits (the caller redoes those)
DATA sck<>+52(SB)/4, $0x7fffffff // |x| mask
DATA sck<>+56(SB)/4, $0x80000000 // sign bit
GLOBL sck<>(SB), RODATA|NOPTR, $60

// func SinCos16(dst, src *float32, n int, cos bool) int
// dst = sin(src) (cos(src) when cos) for n elements (any n: TAIL_START);
// NaN and ±Inf give NaN. Returns how many elements had |x| > 1e6 (±Inf
// among them): the caller computes those again.
TEXT ·SinCos16(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVBLZX cos+24(FP), AX
	LEAQ sck<>(SB), BX
	VBROADCASTSS 0(BX), Z16
	VBROADCASTSS 4(BX), Z17
	VBROADCASTSS 8(BX), Z18
	VBROADCASTSS 12(BX), Z19
	VBROADCASTSS 40(BX), Z20
	VBROADCASTSS 44(BX), Z21
	VBROADCASTSS 48(BX), Z22
	VBROADCASTSS 52(BX), Z23
	VBROADCASTSS 56(BX), Z24
	VPBROADCASTD AX, Z25        // quadrant offset: 1 for cos
	MOVL $1, DX
	VPBROADCASTD DX, Z26        // 1 (int)
	MOVL $2, DX
	VPBROADCASTD DX, Z27        // 2 (int)
	XORQ R8, R8                 // lanes past the limit
	TAIL_START(sctail)
scloop:
	VMOVUPS (SI), Z0
scbody:
	// lanes to redo: |x| > 1e6 (±Inf too; NaN is not counted, it gives NaN)
	VANDPS Z23, Z0, Z1
	VCMPPS $0x1e, Z22, Z1, K3
	KMOVW K3, DX
	POPCNTL DX, DX
	ADDQ DX, R8
	// k = round(x·2/π); r = x - k·π/2
	VMULPS Z16, Z0, Z1
	VRNDSCALEPS $8, Z1, Z1
	VMOVAPS Z0, Z2
	VFNMADD231PS Z17, Z1, Z2
	VFNMADD231PS Z18, Z1, Z2
	VFNMADD231PS Z19, Z1, Z2
	// quadrant q = k + offset (int)
	VCVTPS2DQ Z1, Z3
	VPADDD Z25, Z3, Z3
	VPTESTMD Z26, Z3, K1        // odd quadrant: the cos polynomial
	VPTESTMD Z27, Z3, K2        // quadrants 2, 3: negate
	// z = r²
	VMULPS Z2, Z2, Z4
	// sin r
	VBROADCASTSS 24(BX), Z5
	VFMADD213PS.BCST 20(BX), Z4, Z5
	VFMADD213PS.BCST 16(BX), Z4, Z5
	VMULPS Z2, Z4, Z6
	VFMADD213PS Z2, Z6, Z5      // r + r³·p
	// cos r
	VBROADCASTSS 36(BX), Z7
	VFMADD213PS.BCST 32(BX), Z4, Z7
	VFMADD213PS.BCST 28(BX), Z4, Z7
	VMULPS Z4, Z4, Z8           // r⁴
	VMOVAPS Z21, Z9
	VFNMADD231PS Z20, Z4, Z9    // 1 - r²/2
	VFMADD231PS Z8, Z7, Z9      // + r⁴·q
	VBLENDMPS Z9, Z5, K1, Z10   // odd quadrant: cos r, else sin r
	VXORPS Z24, Z10, K2, Z10    // quadrants 2, 3: negated
	VMOVUPS Z10, K7, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ scloop
sctail:
	TAIL_NEXT(scbody, scdone, Z0)
scdone:
	MOVQ R8, ret+32(FP)
	VZEROUPPER
	RET
