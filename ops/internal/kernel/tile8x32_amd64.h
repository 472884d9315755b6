// The shared frame of the 8x32 micro-kernels that read A's rows in place
// (Sgemm8x32Rows, BF16Gemm8x32):
//
//	func(k int, a *T, lda int, b *T, c *float32, ldc int, bias *float32, add bool)
//
// TILE8x32_ROWS_START loads the arguments (CX = k, SI = a, R8 = lda and
// R9 = ldc in bytes, DI = b, DX = c, BX = bias, R10 = 3·lda, R11 = a +
// 4·lda: rows 0..3 at SI + {0,1,2,3}·lda, rows 4..7 at R11 + …) and clears
// the accumulators Z4..Z19 (row r in Z(4+2r), Z(5+2r)). TILE8x32_ROWS_END,
// after the k loop, adds C when add is set, then bias (32 floats, every
// row) when it is not nil, stores the tile and returns; it uses the labels
// noadd and write.

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

#define TILE8x32_ROWS_END \
	MOVBLZX add+56(FP), AX; \
	TESTL AX, AX; \
	JZ noadd; \
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
	VADDPS 64(DX), Z19, Z19; \
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
	write: VMOVUPS Z4, (DX); \
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
	VMOVUPS Z19, 64(DX); \
	VZEROUPPER; \
	RET
