// The 8x32 micro-kernels that read A's rows in place: Sgemm8x32Rows and
// BF16Gemm8x32,
//
//	func(k int, a *T, lda int, b *T, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int)
//
// (pf, pfLines: lines they prefetch as they go, TILE8x32_ROWS_PREFETCHING),
// and their loop forms Sgemm8x32RowsLoop and BF16Gemm8x32Loop, n tiles
// without bias,
//
//	func(k int, a *T, lda int, b *T, c *float32, ldc, n, as, bs, cs int, add bool)
//
// tile t reading A at a + t·as, B at b + t·bs and C at c + t·cs (strides
// in 4-byte elements). Registers: CX = k, SI = A's row 0, R11 = row 4
// (rows 0..3 at SI + {0,1,2,3}·lda, rows 4..7 at R11 + …, with R8 = lda
// and R10 = 3·lda in bytes), DI = B, DX = C, R9 = ldc in bytes, the tile
// in Z4..Z19 (row r in Z(4+2r), Z(5+2r)), Z0..Z3 scratch. The single-tile
// forms use AX and R12..R15 for their prefetches; the loop forms keep tile
// t's a, b, c in R13, R14, R15, the tiles left in R12 and add in BX. A
// single-tile kernel is
//
//	TEXT ·Name(SB), NOSPLIT, $0-80
//		TILE8x32_ROWS_START
//		TILE8x32_ROWS_PREFETCHING(SGEMM8x32_ROWS_KSTEP) (or BF16_8x32_ROWS_KSTEP)
//		TILE8x32_ROWS_END
//
// and a loop form
//
//	TEXT ·Name(SB), NOSPLIT, $0-81
//		TILE8x32_LOOP_START
//	loop:
//		SGEMM8x32_ROWS_KSTEP (or BF16_8x32_ROWS_KSTEP)
//		DECQ CX
//		JNZ loop
//	store:
//		TILE8x32_LOOP_END
//
// BF16Gemm8x32LoopA8 runs the loop form on A in slivers instead of rows:
// its k pair p is the 8 rows' words at a + p·lda (BF16_8x32_A8_KSTEP).
//
// The macros use the labels tile, store, noadd, write, done, cpf, pfper,
// loop8, pfl, nopf, rest and loop.

#define TILE8x32_ZERO \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19

// C += tile, C at DX (DX moves to row 7).
#define TILE8x32_ADD_C \
	VADDPS (DX), Z4, Z4; \
	VADDPS 64(DX), Z5, Z5; \
	ADDQ R9, DX; \
	VADDPS (DX), Z6, Z6; \
	VADDPS 64(DX), Z7, Z7; \
	ADDQ R9, DX; \
	VADDPS (DX), Z8, Z8; \
	VADDPS 64(DX), Z9, Z9; \
	ADDQ R9, DX; \
	VADDPS (DX), Z10, Z10; \
	VADDPS 64(DX), Z11, Z11; \
	ADDQ R9, DX; \
	VADDPS (DX), Z12, Z12; \
	VADDPS 64(DX), Z13, Z13; \
	ADDQ R9, DX; \
	VADDPS (DX), Z14, Z14; \
	VADDPS 64(DX), Z15, Z15; \
	ADDQ R9, DX; \
	VADDPS (DX), Z16, Z16; \
	VADDPS 64(DX), Z17, Z17; \
	ADDQ R9, DX; \
	VADDPS (DX), Z18, Z18; \
	VADDPS 64(DX), Z19, Z19

// Store the tile at DX (DX moves to row 7).
#define TILE8x32_WRITE \
	VMOVUPS Z4, (DX); \
	VMOVUPS Z5, 64(DX); \
	ADDQ R9, DX; \
	VMOVUPS Z6, (DX); \
	VMOVUPS Z7, 64(DX); \
	ADDQ R9, DX; \
	VMOVUPS Z8, (DX); \
	VMOVUPS Z9, 64(DX); \
	ADDQ R9, DX; \
	VMOVUPS Z10, (DX); \
	VMOVUPS Z11, 64(DX); \
	ADDQ R9, DX; \
	VMOVUPS Z12, (DX); \
	VMOVUPS Z13, 64(DX); \
	ADDQ R9, DX; \
	VMOVUPS Z14, (DX); \
	VMOVUPS Z15, 64(DX); \
	ADDQ R9, DX; \
	VMOVUPS Z16, (DX); \
	VMOVUPS Z17, 64(DX); \
	ADDQ R9, DX; \
	VMOVUPS Z18, (DX); \
	VMOVUPS Z19, 64(DX)

// One k step: C += A[:, p]·B[p, :], then step SI, R11 and DI. A's 8
// values are broadcast by 8 VBROADCASTSS into Z2 and Z3 in turn. Every CPU
// but Zen 4 runs this form (EmbeddedBroadcast false): on the project's
// 2-core Zen 5 VM (2026-11-29, ops/blas -bench Roofline/gemm, one and two
// threads, builds alternating) the projections ran at 93-98% of peak with it
// and at 81-86% with SGEMM8x32_ROWS_KSTEP_EMBEDDED's sixteen load-op
// multiply-adds, and the bare scores product at 98-100% against 85-87%.
#define SGEMM8x32_ROWS_KSTEP \
	VMOVUPS (DI), Z0; \
	VMOVUPS 64(DI), Z1; \
	VBROADCASTSS (SI), Z2; \
	VFMADD231PS Z0, Z2, Z4; \
	VFMADD231PS Z1, Z2, Z5; \
	VBROADCASTSS (SI)(R8*1), Z3; \
	VFMADD231PS Z0, Z3, Z6; \
	VFMADD231PS Z1, Z3, Z7; \
	VBROADCASTSS (SI)(R8*2), Z2; \
	VFMADD231PS Z0, Z2, Z8; \
	VFMADD231PS Z1, Z2, Z9; \
	VBROADCASTSS (SI)(R10*1), Z3; \
	VFMADD231PS Z0, Z3, Z10; \
	VFMADD231PS Z1, Z3, Z11; \
	VBROADCASTSS (R11), Z2; \
	VFMADD231PS Z0, Z2, Z12; \
	VFMADD231PS Z1, Z2, Z13; \
	VBROADCASTSS (R11)(R8*1), Z3; \
	VFMADD231PS Z0, Z3, Z14; \
	VFMADD231PS Z1, Z3, Z15; \
	VBROADCASTSS (R11)(R8*2), Z2; \
	VFMADD231PS Z0, Z2, Z16; \
	VFMADD231PS Z1, Z2, Z17; \
	VBROADCASTSS (R11)(R10*1), Z3; \
	VFMADD231PS Z0, Z3, Z18; \
	VFMADD231PS Z1, Z3, Z19; \
	ADDQ $4, SI; \
	ADDQ $4, R11; \
	ADDQ $128, DI

// SGEMM8x32_ROWS_KSTEP with A's 8 values broadcast by the multiply-adds'
// memory operands (.BCST, twice each: 16 loads a step, within the load
// ports' 3 a cycle), the form Zen 4 runs (EmbeddedBroadcast): there a
// VBROADCASTSS from memory also takes a slot on the FP pipes, so the
// FADD-pipe work that runs beside the products (the scores kernels'
// exponentials) was not free. On the project's 2-core Zen 4 VM
// (2026-11-29) the scores kernel with its exponentials (go test
// ./ops/internal/kernel -bench RooflineAttentionKernels/scores+exp2) went
// from 88% to 94% of peak with the broadcasts folded, and the bare product
// (scores) stayed at 98%. (In a throwaway loop of this step, 16 VADDPS per
// 8 steps cost 4% and 64 cost 11% beside VBROADCASTSS, and nothing beside
// .BCST.) The results are the same bit for bit.
#define SGEMM8x32_ROWS_KSTEP_EMBEDDED \
	VMOVUPS (DI), Z0; \
	VMOVUPS 64(DI), Z1; \
	VFMADD231PS.BCST (SI), Z0, Z4; \
	VFMADD231PS.BCST (SI), Z1, Z5; \
	VFMADD231PS.BCST (SI)(R8*1), Z0, Z6; \
	VFMADD231PS.BCST (SI)(R8*1), Z1, Z7; \
	VFMADD231PS.BCST (SI)(R8*2), Z0, Z8; \
	VFMADD231PS.BCST (SI)(R8*2), Z1, Z9; \
	VFMADD231PS.BCST (SI)(R10*1), Z0, Z10; \
	VFMADD231PS.BCST (SI)(R10*1), Z1, Z11; \
	VFMADD231PS.BCST (R11), Z0, Z12; \
	VFMADD231PS.BCST (R11), Z1, Z13; \
	VFMADD231PS.BCST (R11)(R8*1), Z0, Z14; \
	VFMADD231PS.BCST (R11)(R8*1), Z1, Z15; \
	VFMADD231PS.BCST (R11)(R8*2), Z0, Z16; \
	VFMADD231PS.BCST (R11)(R8*2), Z1, Z17; \
	VFMADD231PS.BCST (R11)(R10*1), Z0, Z18; \
	VFMADD231PS.BCST (R11)(R10*1), Z1, Z19; \
	ADDQ $4, SI; \
	ADDQ $4, R11; \
	ADDQ $128, DI

// One k pair with VDPBF16PS (bf16_amd64.h), then step SI, R11 and DI:
// A's pair words broadcast by VPBROADCASTD into Z2 and Z3 in turn, as
// SGEMM8x32_ROWS_KSTEP's.
#define BF16_8x32_ROWS_KSTEP \
	VMOVDQU32 (DI), Z0; \
	VMOVDQU32 64(DI), Z1; \
	VPBROADCASTD (SI), Z2; \
	VDPBF16PS_Z(0, 2, 4); \
	VDPBF16PS_Z(1, 2, 5); \
	VPBROADCASTD (SI)(R8*1), Z3; \
	VDPBF16PS_Z(0, 3, 6); \
	VDPBF16PS_Z(1, 3, 7); \
	VPBROADCASTD (SI)(R8*2), Z2; \
	VDPBF16PS_Z(0, 2, 8); \
	VDPBF16PS_Z(1, 2, 9); \
	VPBROADCASTD (SI)(R10*1), Z3; \
	VDPBF16PS_Z(0, 3, 10); \
	VDPBF16PS_Z(1, 3, 11); \
	VPBROADCASTD (R11), Z2; \
	VDPBF16PS_Z(0, 2, 12); \
	VDPBF16PS_Z(1, 2, 13); \
	VPBROADCASTD (R11)(R8*1), Z3; \
	VDPBF16PS_Z(0, 3, 14); \
	VDPBF16PS_Z(1, 3, 15); \
	VPBROADCASTD (R11)(R8*2), Z2; \
	VDPBF16PS_Z(0, 2, 16); \
	VDPBF16PS_Z(1, 2, 17); \
	VPBROADCASTD (R11)(R10*1), Z3; \
	VDPBF16PS_Z(0, 3, 18); \
	VDPBF16PS_Z(1, 3, 19); \
	ADDQ $4, SI; \
	ADDQ $4, R11; \
	ADDQ $128, DI

// BF16_8x32_ROWS_KSTEP with A's pair words broadcast by the products'
// memory operands (SI = 6, R8 = 8, R10 = 10, R11 = 11), as
// SGEMM8x32_ROWS_KSTEP_EMBEDDED's: the form Zen 4 runs.
#define BF16_8x32_ROWS_KSTEP_EMBEDDED \
	VMOVDQU32 (DI), Z0; \
	VMOVDQU32 64(DI), Z1; \
	VDPBF16PS_BCST_Z(6, 0, 4); \
	VDPBF16PS_BCST_Z(6, 1, 5); \
	VDPBF16PS_BCST_SIB_Z(6, 8, 0, 0, 6); \
	VDPBF16PS_BCST_SIB_Z(6, 8, 0, 1, 7); \
	VDPBF16PS_BCST_SIB_Z(6, 8, 1, 0, 8); \
	VDPBF16PS_BCST_SIB_Z(6, 8, 1, 1, 9); \
	VDPBF16PS_BCST_SIB_Z(6, 10, 0, 0, 10); \
	VDPBF16PS_BCST_SIB_Z(6, 10, 0, 1, 11); \
	VDPBF16PS_BCST_Z(11, 0, 12); \
	VDPBF16PS_BCST_Z(11, 1, 13); \
	VDPBF16PS_BCST_SIB_Z(11, 8, 0, 0, 14); \
	VDPBF16PS_BCST_SIB_Z(11, 8, 0, 1, 15); \
	VDPBF16PS_BCST_SIB_Z(11, 8, 1, 0, 16); \
	VDPBF16PS_BCST_SIB_Z(11, 8, 1, 1, 17); \
	VDPBF16PS_BCST_SIB_Z(11, 10, 0, 0, 18); \
	VDPBF16PS_BCST_SIB_Z(11, 10, 0, 1, 19); \
	ADDQ $4, SI; \
	ADDQ $4, R11; \
	ADDQ $128, DI

#define TILE8x32_ROWS_START \
	MOVQ k+0(FP), CX; \
	MOVQ a+8(FP), SI; \
	MOVQ lda+16(FP), R8; \
	MOVQ b+24(FP), DI; \
	MOVQ c+32(FP), DX; \
	MOVQ ldc+40(FP), R9; \
	MOVQ bias+48(FP), BX; \
	SHLQ $2, R8; \
	SHLQ $2, R9; \
	LEAQ (R8)(R8*2), R10; \
	LEAQ (SI)(R8*4), R11; \
	TILE8x32_ZERO; \
	TESTQ CX, CX; \
	JE store

// The k loop of Sgemm8x32Rows and BF16Gemm8x32 (KSTEP one k step, or
// pair). First the tile of C's lines (8 rows at DX, R9 bytes apart, 128
// bytes each: three lines where a row is not line-aligned) are asked into
// L2 (PREFETCHT1, R12 counting rows), so that its stores at the end do
// not wait on memory; then eight steps per iteration, each followed by
// the PREFETCHT1s of the next R14 of the pfLines lines at pf (R12, with
// R13 the lines left): R14 is the fewest lines an iteration (at most 8)
// that fetch them all over the k/8 iterations. (One a iteration covered
// a 768-deep panel only where 16 tiles share it: from M = 128 rows; at
// M = 77, CLIP's text length, 56% of it, and the products waited on
// memory for the rest.) Then the k mod 8 steps left one at a time; it
// ends at store.
#define TILE8x32_ROWS_PREFETCHING(KSTEP) \
	MOVQ DX, AX; \
	MOVQ $8, R12; \
	cpf: PREFETCHT1 (AX); \
	PREFETCHT1 64(AX); \
	PREFETCHT1 127(AX); \
	ADDQ R9, AX; \
	DECQ R12; \
	JNZ cpf; \
	MOVQ pf+64(FP), R12; \
	MOVQ pfLines+72(FP), R13; \
	MOVQ CX, AX; \
	SHRQ $3, AX; \
	MOVQ $1, R14; \
	pfper: MOVQ AX, R15; \
	IMULQ R14, R15; \
	CMPQ R15, R13; \
	JGE loop8; \
	INCQ R14; \
	CMPQ R14, $8; \
	JLT pfper; \
	loop8: CMPQ CX, $8; \
	JLT rest; \
	KSTEP; \
	KSTEP; \
	KSTEP; \
	KSTEP; \
	KSTEP; \
	KSTEP; \
	KSTEP; \
	KSTEP; \
	MOVQ R14, AX; \
	pfl: TESTQ R13, R13; \
	JLE nopf; \
	PREFETCHT1 (R12); \
	ADDQ $64, R12; \
	DECQ R13; \
	DECQ AX; \
	JNZ pfl; \
	nopf: SUBQ $8, CX; \
	JMP loop8; \
	rest: TESTQ CX, CX; \
	JE store; \
	loop: KSTEP; \
	DECQ CX; \
	JNZ loop; \
	store:

// Add C when add, then bias when not nil; store; return.
#define TILE8x32_ROWS_END \
	MOVBLZX add+56(FP), AX; \
	TESTL AX, AX; \
	JZ noadd; \
	TILE8x32_ADD_C; \
	MOVQ c+32(FP), DX; \
	noadd: TESTQ BX, BX; \
	JE write; \
	VMOVUPS (BX), Z0; \
	VMOVUPS 64(BX), Z1; \
	VADDPS Z0, Z4, Z4; \
	VADDPS Z1, Z5, Z5; \
	VADDPS Z0, Z6, Z6; \
	VADDPS Z1, Z7, Z7; \
	VADDPS Z0, Z8, Z8; \
	VADDPS Z1, Z9, Z9; \
	VADDPS Z0, Z10, Z10; \
	VADDPS Z1, Z11, Z11; \
	VADDPS Z0, Z12, Z12; \
	VADDPS Z1, Z13, Z13; \
	VADDPS Z0, Z14, Z14; \
	VADDPS Z1, Z15, Z15; \
	VADDPS Z0, Z16, Z16; \
	VADDPS Z1, Z17, Z17; \
	VADDPS Z0, Z18, Z18; \
	VADDPS Z1, Z19, Z19; \
	write: TILE8x32_WRITE; \
	VZEROUPPER; \
	RET

#define TILE8x32_LOOP_START \
	MOVQ a+8(FP), R13; \
	MOVQ lda+16(FP), R8; \
	MOVQ b+24(FP), R14; \
	MOVQ c+32(FP), R15; \
	MOVQ ldc+40(FP), R9; \
	MOVQ n+48(FP), R12; \
	SHLQ $2, R8; \
	SHLQ $2, R9; \
	LEAQ (R8)(R8*2), R10; \
	MOVBLZX add+80(FP), BX; \
	TESTQ R12, R12; \
	JE done; \
	tile: MOVQ k+0(FP), CX; \
	MOVQ R13, SI; \
	LEAQ (SI)(R8*4), R11; \
	MOVQ R14, DI; \
	MOVQ R15, DX; \
	TILE8x32_ZERO; \
	TESTQ CX, CX; \
	JE store

// Add or write the tile, step to the next; return after the last.
#define TILE8x32_LOOP_END \
	TESTL BX, BX; \
	JZ write; \
	TILE8x32_ADD_C; \
	MOVQ R15, DX; \
	write: TILE8x32_WRITE; \
	MOVQ as+56(FP), AX; \
	LEAQ (R13)(AX*4), R13; \
	MOVQ bs+64(FP), AX; \
	LEAQ (R14)(AX*4), R14; \
	MOVQ cs+72(FP), AX; \
	LEAQ (R15)(AX*4), R15; \
	DECQ R12; \
	JNZ tile; \
	done: VZEROUPPER; \
	RET

// One k pair of an A sliver (rows at SI + 4r, the next pair R8 bytes on)
// with VDPBF16PS, then step SI and DI.
#define BF16_8x32_A8_KSTEP \
	VMOVDQU32 (DI), Z0; \
	VMOVDQU32 64(DI), Z1; \
	VPBROADCASTD 0(SI), Z2; \
	VDPBF16PS_Z(0, 2, 4); \
	VDPBF16PS_Z(1, 2, 5); \
	VPBROADCASTD 4(SI), Z3; \
	VDPBF16PS_Z(0, 3, 6); \
	VDPBF16PS_Z(1, 3, 7); \
	VPBROADCASTD 8(SI), Z2; \
	VDPBF16PS_Z(0, 2, 8); \
	VDPBF16PS_Z(1, 2, 9); \
	VPBROADCASTD 12(SI), Z3; \
	VDPBF16PS_Z(0, 3, 10); \
	VDPBF16PS_Z(1, 3, 11); \
	VPBROADCASTD 16(SI), Z2; \
	VDPBF16PS_Z(0, 2, 12); \
	VDPBF16PS_Z(1, 2, 13); \
	VPBROADCASTD 20(SI), Z3; \
	VDPBF16PS_Z(0, 3, 14); \
	VDPBF16PS_Z(1, 3, 15); \
	VPBROADCASTD 24(SI), Z2; \
	VDPBF16PS_Z(0, 2, 16); \
	VDPBF16PS_Z(1, 2, 17); \
	VPBROADCASTD 28(SI), Z3; \
	VDPBF16PS_Z(0, 3, 18); \
	VDPBF16PS_Z(1, 3, 19); \
	ADDQ R8, SI; \
	ADDQ $128, DI
