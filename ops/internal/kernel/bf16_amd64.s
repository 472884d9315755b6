#include "textflag.h"
#include "bf16_amd64.h"
#include "tile8x32_amd64.h"

// func BF16Gemm8x32(k int, a *uint32, lda int, b *uint32, c *float32, ldc int, bias *float32, add bool)
// One k pair per iteration (see tile8x32_amd64.h).
TEXT ·BF16Gemm8x32(SB), NOSPLIT, $0-57
	TILE8x32_ROWS_START
loop:
	BF16_8x32_ROWS_KSTEP
	DECQ CX
	JNZ loop
store:
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
// n BF16Gemm8x32 tiles without bias (see tile8x32_amd64.h).
TEXT ·BF16Gemm8x32Loop(SB), NOSPLIT, $0-81
	TILE8x32_LOOP_START
loop:
	BF16_8x32_ROWS_KSTEP
	DECQ CX
	JNZ loop
store:
	TILE8x32_LOOP_END

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
