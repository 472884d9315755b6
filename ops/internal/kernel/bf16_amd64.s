#include "textflag.h"
#include "tile8x32_amd64.h"
#include "bf16_amd64.h"

// func BF16Gemm8x32(k int, a *uint32, lda int, b *uint32, c *float32, ldc int, bias *float32, add bool)
// Z0, Z1 hold a k pair of B's 32 columns; Z2, Z3 broadcast a pair of A;
// Z4..Z19 the 8x32 tile of C (two ZMM per row). A's rows r = 0..3 are
// read from SI + r·lda, rows 4..7 from R11 = SI + 4·lda (R8 = lda,
// R10 = 3·lda, in bytes). One k pair per iteration.
TEXT ·BF16Gemm8x32(SB), NOSPLIT, $0-57
	TILE8x32_ROWS_START
	TESTQ CX, CX
	JE bstore
bloop:
	VMOVDQU32 (DI), Z0
	VMOVDQU32 64(DI), Z1
	VPBROADCASTD (SI), Z2
	VDPBF16PS_Z(0, 2, 4)
	VDPBF16PS_Z(1, 2, 5)
	VPBROADCASTD (SI)(R8*1), Z3
	VDPBF16PS_Z(0, 3, 6)
	VDPBF16PS_Z(1, 3, 7)
	VPBROADCASTD (SI)(R8*2), Z2
	VDPBF16PS_Z(0, 2, 8)
	VDPBF16PS_Z(1, 2, 9)
	VPBROADCASTD (SI)(R10*1), Z3
	VDPBF16PS_Z(0, 3, 10)
	VDPBF16PS_Z(1, 3, 11)
	VPBROADCASTD (R11), Z2
	VDPBF16PS_Z(0, 2, 12)
	VDPBF16PS_Z(1, 2, 13)
	VPBROADCASTD (R11)(R8*1), Z3
	VDPBF16PS_Z(0, 3, 14)
	VDPBF16PS_Z(1, 3, 15)
	VPBROADCASTD (R11)(R8*2), Z2
	VDPBF16PS_Z(0, 2, 16)
	VDPBF16PS_Z(1, 2, 17)
	VPBROADCASTD (R11)(R10*1), Z3
	VDPBF16PS_Z(0, 3, 18)
	VDPBF16PS_Z(1, 3, 19)
	ADDQ $4, SI
	ADDQ $4, R11
	ADDQ $128, DI
	DECQ CX
	JNZ bloop
bstore:
	TILE8x32_ROWS_END

// func CvtBF16(dst *uint32, src *float32, n int)
// 32 floats an iteration: Z0, Z1 the floats, Z2 their bf16.
TEXT ·CvtBF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JE cdone
cloop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VCVTNE2PS2BF16_Z(0, 1, 2)
	VMOVDQU32 Z2, (DI)
	ADDQ $128, SI
	ADDQ $64, DI
	DECQ CX
	JNZ cloop
cdone:
	VZEROUPPER
	RET

// bf16Samples is never called: it holds one instance of each bf16 macro
// for TestBF16Encodings, which compares its bytes with an assembler's.
TEXT ·bf16Samples(SB), NOSPLIT, $0
	VDPBF16PS_Z(0, 2, 4)
	VDPBF16PS_Z(1, 3, 19)
	VDPBF16PS_Z(17, 30, 9)
	VDPBF16PS_Z(30, 31, 0)
	VCVTNE2PS2BF16_Z(0, 1, 2)
	VCVTNE2PS2BF16_Z(28, 9, 21)
	RET

// func bf16SamplesAddr() *byte
TEXT ·bf16SamplesAddr(SB), NOSPLIT, $0-8
	LEAQ ·bf16Samples(SB), AX
	MOVQ AX, ret+0(FP)
	RET
