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

// func BF16Gemm8x32Loop(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool)
// n BF16Gemm8x32 tiles without bias: tile t reads A's rows at a + t·as
// (words; row r at + r·lda), B at b + t·bs (words) and stores or adds C
// at c + t·cs (floats). R13, R14, R15 hold tile t's a, b and c.
TEXT ·BF16Gemm8x32Loop(SB), NOSPLIT, $0-81
	MOVQ a+8(FP), R13
	MOVQ lda+16(FP), R8
	MOVQ b+24(FP), R14
	MOVQ c+32(FP), R15
	MOVQ ldc+40(FP), R9
	MOVQ n+48(FP), R12
	SHLQ $2, R8
	SHLQ $2, R9
	LEAQ (R8)(R8*2), R10
	MOVBLZX add+80(FP), BX
	TESTQ R12, R12
	JE bldone
bltile:
	MOVQ k+0(FP), CX
	MOVQ R13, SI
	LEAQ (SI)(R8*4), R11
	MOVQ R14, DI
	MOVQ R15, DX
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	TESTQ CX, CX
	JE blstore
blloop:
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
	JNZ blloop
blstore:
	TESTL BX, BX
	JZ blwrite
	VADDPS (DX), Z4, Z4
	VADDPS 64(DX), Z5, Z5
	ADDQ R9, DX
	VADDPS (DX), Z6, Z6
	VADDPS 64(DX), Z7, Z7
	ADDQ R9, DX
	VADDPS (DX), Z8, Z8
	VADDPS 64(DX), Z9, Z9
	ADDQ R9, DX
	VADDPS (DX), Z10, Z10
	VADDPS 64(DX), Z11, Z11
	ADDQ R9, DX
	VADDPS (DX), Z12, Z12
	VADDPS 64(DX), Z13, Z13
	ADDQ R9, DX
	VADDPS (DX), Z14, Z14
	VADDPS 64(DX), Z15, Z15
	ADDQ R9, DX
	VADDPS (DX), Z16, Z16
	VADDPS 64(DX), Z17, Z17
	ADDQ R9, DX
	VADDPS (DX), Z18, Z18
	VADDPS 64(DX), Z19, Z19
	MOVQ R15, DX
blwrite:
	VMOVUPS Z4, (DX)
	VMOVUPS Z5, 64(DX)
	ADDQ R9, DX
	VMOVUPS Z6, (DX)
	VMOVUPS Z7, 64(DX)
	ADDQ R9, DX
	VMOVUPS Z8, (DX)
	VMOVUPS Z9, 64(DX)
	ADDQ R9, DX
	VMOVUPS Z10, (DX)
	VMOVUPS Z11, 64(DX)
	ADDQ R9, DX
	VMOVUPS Z12, (DX)
	VMOVUPS Z13, 64(DX)
	ADDQ R9, DX
	VMOVUPS Z14, (DX)
	VMOVUPS Z15, 64(DX)
	ADDQ R9, DX
	VMOVUPS Z16, (DX)
	VMOVUPS Z17, 64(DX)
	ADDQ R9, DX
	VMOVUPS Z18, (DX)
	VMOVUPS Z19, 64(DX)
	MOVQ as+56(FP), AX
	LEAQ (R13)(AX*4), R13
	MOVQ bs+64(FP), AX
	LEAQ (R14)(AX*4), R14
	MOVQ cs+72(FP), AX
	LEAQ (R15)(AX*4), R15
	DECQ R12
	JNZ bltile
bldone:
	VZEROUPPER
	RET

// func PairRowsBF16x32(dst *uint32, src *float32, rows int)
// Two rows of 32 floats an iteration: Z0..Z3 the floats, Y4..Y7 their
// bf16, widened to words in Z4..Z7 (row 2p in the low halves, row 2p+1
// shifted to the high ones).
TEXT ·PairRowsBF16x32(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rows+16(FP), CX
	MOVQ CX, DX
	SHRQ $1, CX
	JE prtail
prloop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VCVTNEPS2BF16_Z(0, 4)
	VCVTNEPS2BF16_Z(1, 5)
	VCVTNEPS2BF16_Z(2, 6)
	VCVTNEPS2BF16_Z(3, 7)
	VPMOVZXWD Y4, Z4
	VPMOVZXWD Y5, Z5
	VPMOVZXWD Y6, Z6
	VPMOVZXWD Y7, Z7
	VPSLLD $16, Z6, Z6
	VPSLLD $16, Z7, Z7
	VPORD Z6, Z4, Z4
	VPORD Z7, Z5, Z5
	VMOVDQU32 Z4, (DI)
	VMOVDQU32 Z5, 64(DI)
	ADDQ $256, SI
	ADDQ $128, DI
	DECQ CX
	JNZ prloop
prtail:
	TESTQ $1, DX
	JE prdone
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VCVTNEPS2BF16_Z(0, 4)
	VCVTNEPS2BF16_Z(1, 5)
	VPMOVZXWD Y4, Z4
	VPMOVZXWD Y5, Z5
	VMOVDQU32 Z4, (DI)
	VMOVDQU32 Z5, 64(DI)
prdone:
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
	VCVTNEPS2BF16_Z(1, 3)
	VCVTNEPS2BF16_Z(25, 18)
	RET

// func bf16SamplesAddr() *byte
TEXT ·bf16SamplesAddr(SB), NOSPLIT, $0-8
	LEAQ ·bf16Samples(SB), AX
	MOVQ AX, ret+0(FP)
	RET
