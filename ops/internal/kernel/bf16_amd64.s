#include "textflag.h"
#include "bf16_amd64.h"
#include "tile8x32_amd64.h"

// func bf16Gemm8x32Broadcast(k int, a *uint32, lda int, b *uint32, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int)
// BF16Gemm8x32 with VPBROADCASTD; k counts pairs (see tile8x32_amd64.h).
TEXT ·bf16Gemm8x32Broadcast(SB), NOSPLIT, $0-80
	TILE8x32_ROWS_START
	TILE8x32_ROWS_PREFETCHING(BF16_8x32_ROWS_KSTEP)
	TILE8x32_ROWS_END

// func bf16Gemm8x32Embedded(k int, a *uint32, lda int, b *uint32, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int)
// BF16Gemm8x32 with the broadcasts in VDPBF16PS's memory operands.
TEXT ·bf16Gemm8x32Embedded(SB), NOSPLIT, $0-80
	TILE8x32_ROWS_START
	TILE8x32_ROWS_PREFETCHING(BF16_8x32_ROWS_KSTEP_EMBEDDED)
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

// func bf16Gemm8x32LoopBroadcast(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool)
// n BF16Gemm8x32 tiles without bias (see tile8x32_amd64.h), VPBROADCASTD.
TEXT ·bf16Gemm8x32LoopBroadcast(SB), NOSPLIT, $0-81
	TILE8x32_LOOP_START
loop:
	BF16_8x32_ROWS_KSTEP
	DECQ CX
	JNZ loop
store:
	TILE8x32_LOOP_END

// func bf16Gemm8x32LoopEmbedded(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool)
// The same with the broadcasts in VDPBF16PS's memory operands.
TEXT ·bf16Gemm8x32LoopEmbedded(SB), NOSPLIT, $0-81
	TILE8x32_LOOP_START
loop:
	BF16_8x32_ROWS_KSTEP_EMBEDDED
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

// func BF16Gemm8x32LoopA8(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool)
// BF16Gemm8x32Loop with A in slivers (see tile8x32_amd64.h).
TEXT ·BF16Gemm8x32LoopA8(SB), NOSPLIT, $0-81
	TILE8x32_LOOP_START
loop:
	BF16_8x32_A8_KSTEP
	DECQ CX
	JNZ loop
store:
	TILE8x32_LOOP_END

// func PairSliversBF16(dst *uint32, src *float32, lds, pairs, slivers, ldsliver int)
// For each pair p of rows (2p, 2p+1) at src + 2p·lds: 16 columns an
// iteration, both rows rounded to bf16 (Y0, Y1), widened and joined into
// pair words (Z0), the first 8 stored at sliver s's pair p, the next 8 at
// sliver s+1's (slivers ldsliver words apart: R11 bytes).
TEXT ·PairSliversBF16(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ pairs+24(FP), CX
	MOVQ ldsliver+40(FP), R11
	SHLQ $2, R8
	SHLQ $2, R11
	TESTQ CX, CX
	JE psdone
pspair:
	MOVQ slivers+32(FP), DX
	SHRQ $1, DX
	JE psnext
	MOVQ SI, R9
	MOVQ DI, R10
pscols:
	VMOVUPS (R9), Z0
	VMOVUPS (R9)(R8*1), Z1
	VCVTNEPS2BF16_Z(0, 0)
	VCVTNEPS2BF16_Z(1, 1)
	VPMOVZXWD Y0, Z0
	VPMOVZXWD Y1, Z1
	VPSLLD $16, Z1, Z1
	VPORD Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VMOVDQU Y0, (R10)
	VMOVDQU Y1, (R10)(R11*1)
	ADDQ $64, R9
	LEAQ (R10)(R11*2), R10
	DECQ DX
	JNZ pscols
psnext:
	LEAQ (SI)(R8*2), SI
	ADDQ $32, DI
	DECQ CX
	JNZ pspair
psdone:
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
	VDPBF16PS_BCST_Z(6, 0, 4)
	VDPBF16PS_BCST_Z(11, 0, 12)
	VDPBF16PS_BCST_SIB_Z(6, 8, 0, 0, 6)
	VDPBF16PS_BCST_SIB_Z(6, 8, 1, 0, 8)
	VDPBF16PS_BCST_SIB_Z(6, 10, 0, 0, 10)
	VDPBF16PS_BCST_SIB_Z(11, 8, 0, 0, 14)
	VDPBF16PS_BCST_SIB_Z(11, 8, 1, 0, 16)
	VDPBF16PS_BCST_SIB_Z(11, 10, 0, 1, 19)
	RET

// func bf16SamplesAddr() *byte
TEXT ·bf16SamplesAddr(SB), NOSPLIT, $0-8
	LEAQ ·bf16Samples(SB), AX
	MOVQ AX, ret+0(FP)
	RET

// func GatherPairsBF16x32(dst *uint32, src *float32, lds, pairs int, scale float32)
// One k pair (two adjacent columns) of 32 rows an iteration: four 8-row
// qword gathers into Z0..Z3 (each qword a row's two floats), scaled by
// Z6, rounded to bf16 (Y0..Y3: a qword's two floats become one pair word)
// and stored in row order. Y4, Y5 hold the row offsets c·lds for rows
// 0..7 and 8..15 (rows 16..31 are 16·lds further: R8).
TEXT ·GatherPairsBF16x32(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), AX
	MOVQ pairs+24(FP), CX
	VBROADCASTSS scale+32(FP), Z6
	VPBROADCASTD AX, Y7
	VPMULLD ·iota16(SB), Y7, Y4
	MOVQ AX, BX
	SHLQ $3, BX
	VPBROADCASTD BX, Y7
	VPADDD Y7, Y4, Y5
	SHLQ $6, AX // 16·lds floats, in bytes
	LEAQ (SI)(AX*1), R8
	TESTQ CX, CX
	JE gpdone
gploop:
	KXNORW K1, K1, K1
	KXNORW K2, K2, K2
	KXNORW K3, K3, K3
	KXNORW K4, K4, K4
	VPGATHERDQ (SI)(Y4*4), K1, Z0
	VPGATHERDQ (SI)(Y5*4), K2, Z1
	VPGATHERDQ (R8)(Y4*4), K3, Z2
	VPGATHERDQ (R8)(Y5*4), K4, Z3
	VMULPS Z6, Z0, Z0
	VMULPS Z6, Z1, Z1
	VMULPS Z6, Z2, Z2
	VMULPS Z6, Z3, Z3
	VCVTNEPS2BF16_Z(0, 0)
	VCVTNEPS2BF16_Z(1, 1)
	VCVTNEPS2BF16_Z(2, 2)
	VCVTNEPS2BF16_Z(3, 3)
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ $8, SI
	ADDQ $8, R8
	ADDQ $128, DI
	DECQ CX
	JNZ gploop
gpdone:
	VZEROUPPER
	RET
