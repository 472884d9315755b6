#include "textflag.h"
#include "bf16_amd64.h"
#include "tile8x32_amd64.h"

// The fused attention's scores kernel: the 8×32 tile of Sgemm8x32RowsLoop
// with the streaming softmax's exponential in its epilogue, so that a
// tile of scores is stored once, as exp(score - shift), and never re-read
// for its maximum or its exponential.

DATA attnk<>+0(SB)/4, $0x3fb8aa3b  // log2(e)
DATA attnk<>+4(SB)/4, $0x3f317218  // ln 2
DATA attnk<>+8(SB)/4, $0xc2d00000  // -104: exp below it is 0 in float32 (clamps -Inf)
DATA attnk<>+12(SB)/4, $0x3f800000 // 1
DATA attnk<>+16(SB)/4, $0x00000000 // free (was the scores kernels' fixed slack: the callers give limits now)
DATA attnk<>+20(SB)/4, $0xff800000 // -Inf
DATA attnk<>+24(SB)/4, $0x49400000 // 1.5·2^19: t + 1.5·2^19 rounds t to a multiple of 1/16
DATA attnk<>+28(SB)/4, $0x3f000110 // p2, p3: e^r ≈ 1 + r + p2·r² + p3·r³ on |r| ≤ ln2/32 (EXP_TAB16)
DATA attnk<>+32(SB)/4, $0x3e2aa91c
DATA attnk<>+36(SB)/4, $0x3f80066b // c0..c2: exp(r) ≈ 1 + r·Σ c_k·r^k on |r| ≤ ln2/2, relative error 1.02e-4
DATA attnk<>+40(SB)/4, $0x3f010ebe // (a minimax fit for bf16 probabilities, whose rounding is 2^-9)
DATA attnk<>+44(SB)/4, $0x3e2924ce
DATA attnk<>+48(SB)/4, $0xc3170000 // -151: 2^x below it is 0 in float32 (clamps -Inf; EXP2_TAB32)
DATA attnk<>+52(SB)/4, $0x00000000 // free (as +16)
DATA attnk<>+56(SB)/4, $0x48c00000 // 1.5·2^18: t + 1.5·2^18 rounds t to a multiple of 1/32 (EXP2_TAB32)
DATA attnk<>+60(SB)/4, $0x3f3172c1 // c1, c2: 2^r ≈ 1 + c1·r + c2·r² on |r| ≤ 1/64 (EXP2_TAB32; the whole exponential's
DATA attnk<>+64(SB)/4, $0x3e75fdb0 // float32 error searched over the coefficients' last bits: go run ./tools/expfit)
DATA attnk<>+68(SB)/4, $0x3f317afe // c0..c2 times ln2, ln²2, ln³2: 2^r ≈ 1 + r·Σ c_k·r^k on |r| ≤ 1/2, the bf16
DATA attnk<>+72(SB)/4, $0x3e780641 // polynomial above with r in base 2 (EXP2_BF16_MEM), relative error 1.02e-4
DATA attnk<>+76(SB)/4, $0x3d6150f1
GLOBL attnk<>(SB), RODATA|NOPTR, $80

// 2^(j/16) for j = 0..15, rounded to float32: EXP_TAB16's table (Z30).
DATA exptab<>+0(SB)/4, $0x3f800000
DATA exptab<>+4(SB)/4, $0x3f85aac3
DATA exptab<>+8(SB)/4, $0x3f8b95c2
DATA exptab<>+12(SB)/4, $0x3f91c3d3
DATA exptab<>+16(SB)/4, $0x3f9837f0
DATA exptab<>+20(SB)/4, $0x3f9ef532
DATA exptab<>+24(SB)/4, $0x3fa5fed7
DATA exptab<>+28(SB)/4, $0x3fad583f
DATA exptab<>+32(SB)/4, $0x3fb504f3
DATA exptab<>+36(SB)/4, $0x3fbd08a4
DATA exptab<>+40(SB)/4, $0x3fc5672a
DATA exptab<>+44(SB)/4, $0x3fce248c
DATA exptab<>+48(SB)/4, $0x3fd744fd
DATA exptab<>+52(SB)/4, $0x3fe0ccdf
DATA exptab<>+56(SB)/4, $0x3feac0c7
DATA exptab<>+60(SB)/4, $0x3ff5257d
GLOBL exptab<>(SB), RODATA|NOPTR, $64

// 2^(j/32) for j = 0..31, rounded to float32: EXP2_TAB32's table (Z30 holds
// the first 16, VPERMI2PS reads the last 16 from memory; go run ./tools/expfit
// prints it).
DATA exptab32<>+0(SB)/4, $0x3f800000
DATA exptab32<>+4(SB)/4, $0x3f82cd87
DATA exptab32<>+8(SB)/4, $0x3f85aac3
DATA exptab32<>+12(SB)/4, $0x3f88980f
DATA exptab32<>+16(SB)/4, $0x3f8b95c2
DATA exptab32<>+20(SB)/4, $0x3f8ea43a
DATA exptab32<>+24(SB)/4, $0x3f91c3d3
DATA exptab32<>+28(SB)/4, $0x3f94f4f0
DATA exptab32<>+32(SB)/4, $0x3f9837f0
DATA exptab32<>+36(SB)/4, $0x3f9b8d3a
DATA exptab32<>+40(SB)/4, $0x3f9ef532
DATA exptab32<>+44(SB)/4, $0x3fa27043
DATA exptab32<>+48(SB)/4, $0x3fa5fed7
DATA exptab32<>+52(SB)/4, $0x3fa9a15b
DATA exptab32<>+56(SB)/4, $0x3fad583f
DATA exptab32<>+60(SB)/4, $0x3fb123f6
DATA exptab32<>+64(SB)/4, $0x3fb504f3
DATA exptab32<>+68(SB)/4, $0x3fb8fbaf
DATA exptab32<>+72(SB)/4, $0x3fbd08a4
DATA exptab32<>+76(SB)/4, $0x3fc12c4d
DATA exptab32<>+80(SB)/4, $0x3fc5672a
DATA exptab32<>+84(SB)/4, $0x3fc9b9be
DATA exptab32<>+88(SB)/4, $0x3fce248c
DATA exptab32<>+92(SB)/4, $0x3fd2a81e
DATA exptab32<>+96(SB)/4, $0x3fd744fd
DATA exptab32<>+100(SB)/4, $0x3fdbfbb8
DATA exptab32<>+104(SB)/4, $0x3fe0ccdf
DATA exptab32<>+108(SB)/4, $0x3fe5b907
DATA exptab32<>+112(SB)/4, $0x3feac0c7
DATA exptab32<>+116(SB)/4, $0x3fefe4ba
DATA exptab32<>+120(SB)/4, $0x3ff5257d
DATA exptab32<>+124(SB)/4, $0x3ffa83b3
GLOBL exptab32<>(SB), RODATA|NOPTR, $128

// VPERMW indexes that interleave the two halves of a VCVTNE2PS2BF16
// result: word 2i from word i (the low source), word 2i+1 from word 16+i.
DATA pairidx<>+0(SB)/2, $0
DATA pairidx<>+2(SB)/2, $16
DATA pairidx<>+4(SB)/2, $1
DATA pairidx<>+6(SB)/2, $17
DATA pairidx<>+8(SB)/2, $2
DATA pairidx<>+10(SB)/2, $18
DATA pairidx<>+12(SB)/2, $3
DATA pairidx<>+14(SB)/2, $19
DATA pairidx<>+16(SB)/2, $4
DATA pairidx<>+18(SB)/2, $20
DATA pairidx<>+20(SB)/2, $5
DATA pairidx<>+22(SB)/2, $21
DATA pairidx<>+24(SB)/2, $6
DATA pairidx<>+26(SB)/2, $22
DATA pairidx<>+28(SB)/2, $7
DATA pairidx<>+30(SB)/2, $23
DATA pairidx<>+32(SB)/2, $8
DATA pairidx<>+34(SB)/2, $24
DATA pairidx<>+36(SB)/2, $9
DATA pairidx<>+38(SB)/2, $25
DATA pairidx<>+40(SB)/2, $10
DATA pairidx<>+42(SB)/2, $26
DATA pairidx<>+44(SB)/2, $11
DATA pairidx<>+46(SB)/2, $27
DATA pairidx<>+48(SB)/2, $12
DATA pairidx<>+50(SB)/2, $28
DATA pairidx<>+52(SB)/2, $13
DATA pairidx<>+54(SB)/2, $29
DATA pairidx<>+56(SB)/2, $14
DATA pairidx<>+58(SB)/2, $30
DATA pairidx<>+60(SB)/2, $15
DATA pairidx<>+62(SB)/2, $31
GLOBL pairidx<>(SB), RODATA|NOPTR, $64

// The 16 floats x at OFF(DX) become exp(x - S), added into SUM: x' =
// max(x - S, -104) (-Inf and all below give 0, NaN stays NaN); t =
// x'·log2 e rounded to n = m + j/16 (m whole, j = 0..15) by adding
// 1.5·2^19, whose sum's low 4 mantissa bits are j; r = x' - n·ln2 (one
// rounding, |r| ≤ ln2/32); exp(x') = 2^m·2^(j/16)·e^r with 2^(j/16) from
// Z30's 16 lanes (VPERMPS by those bits), e^r ≈ 1 + r + p2·r² + p3·r³
// and 2^m by VSCALEFPS (which takes floor(n) = m). Within 1.5 ulp of
// exp(x - S) with x - S rounded to float32, plus 2.8e-9 relative per unit
// of |x'| (ln 2 in float32); 6 ops on the FMA pipes, where a degree-5
// polynomial over |r| ≤ ln2/2 takes 7 and is within 2.3 ulp. Z31 -104,
// BX the constants; Z26..Z29 scratch.
#define EXP_TAB16(OFF, S, SUM) \
	VMOVUPS OFF(DX), Z26; \
	VSUBPS S, Z26, Z26; \
	VMAXPS Z26, Z31, Z26; \
	VMULPS.BCST 0(BX), Z26, Z27; \
	VADDPS.BCST 24(BX), Z27, Z27; \
	VSUBPS.BCST 24(BX), Z27, Z28; \
	VFNMADD231PS.BCST 4(BX), Z28, Z26; \
	VPERMPS Z30, Z27, Z27; \
	VBROADCASTSS 32(BX), Z29; \
	VFMADD213PS.BCST 28(BX), Z26, Z29; \
	VFMADD213PS.BCST 12(BX), Z26, Z29; \
	VMULPS Z26, Z27, Z26; \
	VFMADD231PS Z29, Z26, Z27; \
	VSCALEFPS Z28, Z27, Z26; \
	VMOVUPS Z26, OFF(DX); \
	VADDPS Z26, SUM, SUM

// The 16 floats x at OFF(DX), scores in base 2 (log2 e·scale·Q·Kᵀ), become
// 2^(x - S), added into SUM: x' = max(x - S, -151) (-Inf and all below give
// 0, NaN stays NaN); x' rounded to n = m + j/32 (m whole, j = 0..31) by
// adding 1.5·2^18, whose sum's low 5 bits are j; r = x' - n (exact, |r| ≤
// 1/64); 2^x' = 2^m·2^(j/32)·2^r with 2^(j/32) from the 32-entry table
// (VPERMI2PS by those bits: Z30 and exptab32<>'s second half), 2^r ≈ 1 +
// c1·r + c2·r² and 2^m by VSCALEFPS (which takes floor(n) = m). Within 1.75
// ulp of 2^(x - S) with x - S rounded to float32. Three ops on the FMA pipes
// where EXP_TAB16 takes six (the scores kernel runs 5% faster with it); the
// reduction's adds go to the FADD pipes, which the products leave idle. Z31
// -151, Z30 the table's first half, BX the constants; Z26..Z29 scratch.
#define EXP2_TAB32(OFF, S, SUM) \
	VMOVUPS OFF(DX), Z26; \
	VSUBPS S, Z26, Z26; \
	VMAXPS Z26, Z31, Z26; \
	VADDPS.BCST 56(BX), Z26, Z27; \
	VSUBPS.BCST 56(BX), Z27, Z28; \
	VSUBPS Z28, Z26, Z26; \
	VPERMI2PS exptab32<>+64(SB), Z30, Z27; \
	VBROADCASTSS 64(BX), Z29; \
	VFMADD213PS.BCST 60(BX), Z26, Z29; \
	VMULPS Z26, Z27, Z26; \
	VFMADD231PS Z29, Z26, Z27; \
	VSCALEFPS Z28, Z27, Z26; \
	VMOVUPS Z26, OFF(DX); \
	VADDPS Z26, SUM, SUM

// One row of the pending tile at DX (rows R9 bytes apart) to exp(row -
// shift) (EXP: EXP_TAB16 or EXP2_TAB32) in place, shifts Z20, Z21 and sums Z24, Z25: DX moves to the next
// row, AX (the rows pending) down by one.
#define EXP_PENDING_ROW(EXP) \
	EXP(0, Z20, Z24); \
	EXP(64, Z21, Z25); \
	ADDQ R9, DX; \
	DECQ AX

// Add bias[8t + r] (bias at AX) to row r of tile t = N - R12 in Z4..Z19
// (DX scratch).
#define TILE8x32_KEY_BIAS(N) \
	MOVQ N, DX; \
	SUBQ R12, DX; \
	SHLQ $5, DX; \
	ADDQ DX, AX; \
	VADDPS.BCST 0(AX), Z4, Z4; \
	VADDPS.BCST 0(AX), Z5, Z5; \
	VADDPS.BCST 4(AX), Z6, Z6; \
	VADDPS.BCST 4(AX), Z7, Z7; \
	VADDPS.BCST 8(AX), Z8, Z8; \
	VADDPS.BCST 8(AX), Z9, Z9; \
	VADDPS.BCST 12(AX), Z10, Z10; \
	VADDPS.BCST 12(AX), Z11, Z11; \
	VADDPS.BCST 16(AX), Z12, Z12; \
	VADDPS.BCST 16(AX), Z13, Z13; \
	VADDPS.BCST 20(AX), Z14, Z14; \
	VADDPS.BCST 20(AX), Z15, Z15; \
	VADDPS.BCST 24(AX), Z16, Z16; \
	VADDPS.BCST 24(AX), Z17, Z17; \
	VADDPS.BCST 28(AX), Z18, Z18; \
	VADDPS.BCST 28(AX), Z19, Z19

// Add the 32 floats at RB + (8t + r)·RBS·4 bytes to row r of tile t = N -
// R12 in Z4..Z19 (a bias by its diagonals, RBS -1: each row's terms lie a
// float below the previous row's; AX, DX scratch).
#define TILE8x32_ROW_BIAS(N, RB, RBS) \
	MOVQ N, DX; \
	SUBQ R12, DX; \
	IMULQ RBS, DX; \
	SHLQ $5, DX; \
	MOVQ RB, AX; \
	ADDQ DX, AX; \
	MOVQ RBS, DX; \
	SHLQ $2, DX; \
	VADDPS (AX), Z4, Z4; \
	VADDPS 64(AX), Z5, Z5; \
	ADDQ DX, AX; \
	VADDPS (AX), Z6, Z6; \
	VADDPS 64(AX), Z7, Z7; \
	ADDQ DX, AX; \
	VADDPS (AX), Z8, Z8; \
	VADDPS 64(AX), Z9, Z9; \
	ADDQ DX, AX; \
	VADDPS (AX), Z10, Z10; \
	VADDPS 64(AX), Z11, Z11; \
	ADDQ DX, AX; \
	VADDPS (AX), Z12, Z12; \
	VADDPS 64(AX), Z13, Z13; \
	ADDQ DX, AX; \
	VADDPS (AX), Z14, Z14; \
	VADDPS 64(AX), Z15, Z15; \
	ADDQ DX, AX; \
	VADDPS (AX), Z16, Z16; \
	VADDPS 64(AX), Z17, Z17; \
	ADDQ DX, AX; \
	VADDPS (AX), Z18, Z18; \
	VADDPS 64(AX), Z19, Z19

// The tile's column maxima over its 8 rows: Z0 (lanes 0..15), Z1 (16..31).
#define TILE8x32_COL_MAX \
	VMAXPS Z6, Z4, Z0; \
	VMAXPS Z8, Z0, Z0; \
	VMAXPS Z10, Z0, Z0; \
	VMAXPS Z12, Z0, Z0; \
	VMAXPS Z14, Z0, Z0; \
	VMAXPS Z16, Z0, Z0; \
	VMAXPS Z18, Z0, Z0; \
	VMAXPS Z7, Z5, Z1; \
	VMAXPS Z9, Z1, Z1; \
	VMAXPS Z11, Z1, Z1; \
	VMAXPS Z13, Z1, Z1; \
	VMAXPS Z15, Z1, Z1; \
	VMAXPS Z17, Z1, Z1; \
	VMAXPS Z19, Z1, Z1

// The exponential epilogue's registers, from the shifts at AX, the limits
// at CX and the sums at DX: BX the constants, Z20, Z21 the shifts (-Inf as
// 0), Z22, Z23 the limits a column's maximum may reach before the kernel
// stops, Z24, Z25 the sums.
#define TILE8x32_EXP_START \
	LEAQ attnk<>(SB), BX; \
	VMOVUPS (AX), Z20; \
	VMOVUPS 64(AX), Z21; \
	VMOVUPS (CX), Z22; \
	VMOVUPS 64(CX), Z23; \
	VBROADCASTSS 20(BX), Z2; \
	VCMPPS $0, Z2, Z20, K1; \
	VPXORD Z20, Z20, K1, Z20; \
	VCMPPS $0, Z2, Z21, K1; \
	VPXORD Z21, Z21, K1, Z21; \
	VMOVUPS (DX), Z24; \
	VMOVUPS 64(DX), Z25

// Sets ZF clear (JNZ taken) when a column maximum (Z0, Z1) exceeds its
// limit (Z22, Z23).
#define TILE8x32_OVER_SLACK \
	VCMPPS $0x1e, Z22, Z0, K1; \
	VCMPPS $0x1e, Z23, Z1, K2; \
	KORW K1, K2, K1; \
	KORTESTW K1, K1

// The scores kernels' return: at expover (a tile over its limits) the
// maxima Z0, Z1 go to MX; at expdone the sums Z24, Z25 to SUM; OUT gets
// the tiles done, N - R12.
#define TILE8x32_EXP_END(MX, SUM, N, OUT) \
	expover: MOVQ MX, AX; \
	VMOVUPS Z0, (AX); \
	VMOVUPS Z1, 64(AX); \
	expdone: MOVQ SUM, AX; \
	VMOVUPS Z24, (AX); \
	VMOVUPS Z25, 64(AX); \
	MOVQ N, AX; \
	SUBQ R12, AX; \
	MOVQ AX, OUT; \
	VZEROUPPER; \
	RET

// One tile's products in the pipelined scores kernels (KSTEP a k step;
// k from k+0(FP), A's 8 rows from R13, lda R8 bytes, the panel from R14),
// the accumulators zeroed first, with the previous tile's pending work
// (PENDING, AX items left) done one item per 8 k steps and what is left of
// it after the products. Labels ptile (the loop's head), pk8, pknext,
// pkrest, pkloop, pkdrain; it ends at pkdone, nothing pending.
#define PIPELINED_TILE(KSTEP, PENDING) \
ptile: \
	MOVQ k+0(FP), CX \
	MOVQ R13, SI \
	LEAQ (SI)(R8*4), R11 \
	MOVQ R14, DI \
	TILE8x32_ZERO \
	CMPQ CX, $8 \
	JLT pkrest \
pk8: \
	KSTEP \
	KSTEP \
	KSTEP \
	KSTEP \
	KSTEP \
	KSTEP \
	KSTEP \
	KSTEP \
	TESTQ AX, AX \
	JE pknext \
	PENDING \
pknext: \
	SUBQ $8, CX \
	CMPQ CX, $8 \
	JGE pk8 \
pkrest: \
	TESTQ CX, CX \
	JE pkdrain \
pkloop: \
	KSTEP \
	DECQ CX \
	JNZ pkloop \
pkdrain: \
	TESTQ AX, AX \
	JE pkdone \
	PENDING \
	JMP pkdrain \
pkdone:

// X = exp(X - S) for the column shift S, added into SUM, for probabilities
// rounded to bf16 next: x' = max(x - S, -104), n = round(x'·log2 e), r =
// x' - n·ln2 (one rounding, |r| ≤ ln2/2), e^r ≈ 1 + r·(c0 + c1·r +
// c2·r²) (within 1.02e-4 relative, where the rounding to bf16 that follows
// is up to 2^-9), scaled by 2^n (VSCALEFPS). Its constants are read from
// BX and N, P are its scratch, so that it leaves the products' registers
// (and Z20..Z25, Z31) alone.
#define EXP_BF16_MEM(X, S, SUM, N, P) \
	VSUBPS S, X, X; \
	VMAXPS.BCST 8(BX), X, X; \
	VMULPS.BCST 0(BX), X, N; \
	VRNDSCALEPS $8, N, N; \
	VFNMADD231PS.BCST 4(BX), N, X; \
	VBROADCASTSS 44(BX), P; \
	VFMADD213PS.BCST 40(BX), X, P; \
	VFMADD213PS.BCST 36(BX), X, P; \
	VFMADD213PS.BCST 12(BX), X, P; \
	VSCALEFPS N, P, X; \
	VADDPS X, SUM, SUM

// EXP_BF16_MEM in base 2: X = 2^(X - S), n = round(x') and r = x' - n
// (exact, |r| ≤ 1/2) on the FADD pipes, the same polynomial with its
// coefficients times powers of ln 2: three FMA-pipe ops where
// EXP_BF16_MEM takes five.
#define EXP2_BF16_MEM(X, S, SUM, N, P) \
	VSUBPS S, X, X; \
	VMAXPS.BCST 48(BX), X, X; \
	VRNDSCALEPS $8, X, N; \
	VSUBPS N, X, X; \
	VBROADCASTSS 76(BX), P; \
	VFMADD213PS.BCST 72(BX), X, P; \
	VFMADD213PS.BCST 68(BX), X, P; \
	VFMADD213PS.BCST 12(BX), X, P; \
	VSCALEFPS N, P, X; \
	VADDPS X, SUM, SUM

// One pending pair of rows of the bf16 scores kernel's staged tile: rows
// 2p and 2p+1, stored raw (fp32, 128 bytes a row) at DX, become their
// exponentials (EXP: EXP_BF16_MEM or EXP2_BF16_MEM) under the shifts Z20,
// Z21 (sums Z24, Z25) and 32 pair
// words (the even row in the low halves) of each half at R9 and 64(R9);
// DX moves to the next pair (256 bytes), R9 to its words (128 bytes), AX
// (the pairs pending) down by one. R9 trails DX, so every word it writes
// lies on rows already read. Z26..Z30 scratch, Z31 the pair indexes.
#define EXP_PENDING_PAIR(EXP) \
	VMOVUPS 0(DX), Z26; \
	EXP(Z26, Z20, Z24, Z28, Z29); \
	VMOVUPS 128(DX), Z27; \
	EXP(Z27, Z20, Z24, Z28, Z29); \
	VCVTNE2PS2BF16_Z(26, 27, 30); \
	VPERMW Z30, Z31, Z30; \
	VMOVDQU32 Z30, 0(R9); \
	VMOVUPS 64(DX), Z26; \
	EXP(Z26, Z21, Z25, Z28, Z29); \
	VMOVUPS 192(DX), Z27; \
	EXP(Z27, Z21, Z25, Z28, Z29); \
	VCVTNE2PS2BF16_Z(26, 27, 30); \
	VPERMW Z30, Z31, Z30; \
	VMOVDQU32 Z30, 64(R9); \
	ADDQ $256, DX; \
	ADDQ $128, R9; \
	DECQ AX

// The bf16 scores kernels' body (ScoresExpBF16x32 and ScoresExpBF16x32Base2):
// ScoresExp8x32's with the k pairs of VDPBF16PS (BF16_8x32_ROWS_KSTEP) and
// the exponentials stored as bf16 pair words, 128 a tile at c + 512t bytes
// (rows 2p and 2p+1 at 128p words). The exponentials run a tile behind the
// products: a tile that passes the limit check is staged raw (fp32, rows
// 128 bytes apart) at its own words and the next tile's, and its pairs of
// rows (EXP_PENDING_PAIR: EXP, the pair words over the rows already read)
// are done one per 8 k pairs of the next tile's products, the rest
// before its epilogue and before returning. Z31 the pair indexes.
#define SCORES_EXP_BF16(KSTEP, EXP) \
	MOVQ a+8(FP), R13 \
	MOVQ lda+16(FP), R8 \
	MOVQ b+24(FP), R14 \
	MOVQ c+32(FP), R15 \
	MOVQ n+40(FP), R12 \
	SHLQ $2, R8 \
	LEAQ (R8)(R8*2), R10 \
	MOVQ shift+56(FP), AX \
	MOVQ limit+64(FP), CX \
	MOVQ sum+72(FP), DX \
	TILE8x32_EXP_START \
	VMOVDQU32 pairidx<>(SB), Z31 \
	XORQ AX, AX \
	TESTQ R12, R12 \
	JE expdone \
	PIPELINED_TILE(KSTEP, EXP_PENDING_PAIR(EXP)) \
	MOVQ bias+88(FP), AX \
	TESTQ AX, AX \
	JE benobias \
	TILE8x32_KEY_BIAS(n+40(FP)) \
benobias: \
	MOVQ rb+96(FP), AX \
	TESTQ AX, AX \
	JE benorowbias \
	TILE8x32_ROW_BIAS(n+40(FP), rb+96(FP), rbs+104(FP)) \
benorowbias: \
	XORQ AX, AX \
	TILE8x32_COL_MAX \
	TILE8x32_OVER_SLACK \
	JNZ expover \
	MOVQ R15, DX \
	MOVQ $128, R9 \
	TILE8x32_WRITE \
	MOVQ R15, DX \
	MOVQ R15, R9 \
	MOVQ $4, AX \
	MOVQ as+48(FP), CX \
	LEAQ (R13)(CX*4), R13 \
	ADDQ $512, R15 \
	DECQ R12 \
	JNZ ptile \
belast: \
	TESTQ AX, AX \
	JE expdone \
	EXP_PENDING_PAIR(EXP) \
	JMP belast \
	TILE8x32_EXP_END(mx+80(FP), sum+72(FP), n+40(FP), ret+112(FP))

// The scores kernels' body (ScoresExp8x32 and ScoresExp8x32Base2, which
// share the signature): tiles as Sgemm8x32RowsLoop's (A's 8 rows in place
// at a + t·as, the packed k×32 panel B shared, C at c + t·cs); with a
// bias (not nil) it adds bias[8t + r] to every column of the tile's row r
// (a per-key mask, broadcast to the 32 queries), with a row bias rb (not
// nil) the 32 floats at rb + (8t + r)·rbs to its 32 columns (a bias by its
// diagonals: rbs -1); before storing tile t it
// takes each column's maximum over the tile's 8 rows; when a column's
// exceeds the column's limit (limit, 32 floats) it writes the 32 maxima to mx and
// returns t, storing nothing of that tile; else it stores EXP of (tile -
// shift) (per column) and adds its columns' sums to sum. It returns n when
// every tile is done. A shift of -Inf (no finite score seen yet) subtracts
// 0, so that -Inf scores give 0 rather than NaN. Z20, Z21: the shift (-Inf
// as 0); Z22, Z23: the limits; Z24, Z25: the sums; Z31 EXP's clamp (at
// CLAMP(BX)), Z30 its table (TAB, 16 floats).
//
// The exponentials run a tile behind the products, in software: tile t
// is stored as it is, and its rows (AX of them pending at DX) turn into
// exponentials one per 8 k steps of tile t + 1, whose multiply-adds
// (Z0..Z19) they do not touch (EXP: Z26..Z31), so that the two share the
// FMA pipes instead of the products waiting for the exponentials. The
// rows still pending after tile t + 1's products (k < 64), and the last
// tile's, are done before the next tile's epilogue and before returning.
#define SCORES_EXP_8x32(KSTEP, EXP, CLAMP, TAB) \
	MOVQ a+8(FP), R13 \
	MOVQ lda+16(FP), R8 \
	MOVQ b+24(FP), R14 \
	MOVQ c+32(FP), R15 \
	MOVQ ldc+40(FP), R9 \
	MOVQ n+48(FP), R12 \
	SHLQ $2, R8 \
	SHLQ $2, R9 \
	LEAQ (R8)(R8*2), R10 \
	MOVQ shift+72(FP), AX \
	MOVQ limit+80(FP), CX \
	MOVQ sum+88(FP), DX \
	TILE8x32_EXP_START \
	VBROADCASTSS CLAMP(BX), Z31 \
	VMOVUPS TAB, Z30 \
	XORQ AX, AX \
	TESTQ R12, R12 \
	JE expdone \
	PIPELINED_TILE(KSTEP, EXP_PENDING_ROW(EXP)) \
	MOVQ bias+104(FP), AX \
	TESTQ AX, AX \
	JE senobias \
	TILE8x32_KEY_BIAS(n+48(FP)) \
senobias: \
	MOVQ rb+112(FP), AX \
	TESTQ AX, AX \
	JE senorowbias \
	TILE8x32_ROW_BIAS(n+48(FP), rb+112(FP), rbs+120(FP)) \
senorowbias: \
	TILE8x32_COL_MAX \
	TILE8x32_OVER_SLACK \
	JNZ expover \
	MOVQ R15, DX \
	TILE8x32_WRITE \
	MOVQ R15, DX \
	MOVQ $8, AX \
	MOVQ as+56(FP), CX \
	LEAQ (R13)(CX*4), R13 \
	MOVQ cs+64(FP), CX \
	LEAQ (R15)(CX*4), R15 \
	DECQ R12 \
	JNZ ptile \
selast: \
	EXP_PENDING_ROW(EXP) \
	TESTQ AX, AX \
	JNE selast \
	JMP expdone \
	TILE8x32_EXP_END(mx+96(FP), sum+88(FP), n+48(FP), ret+128(FP))

// func scoresExp8x32Broadcast(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
// exp(tile - shift) in natural units (EXP_TAB16), VBROADCASTSS.
TEXT ·scoresExp8x32Broadcast(SB), NOSPLIT, $0-136
	SCORES_EXP_8x32(SGEMM8x32_ROWS_KSTEP, EXP_TAB16, 8, exptab<>(SB))

// func scoresExp8x32Embedded(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
// exp(tile - shift) in natural units (EXP_TAB16), broadcasts in the products' memory operands.
TEXT ·scoresExp8x32Embedded(SB), NOSPLIT, $0-136
	SCORES_EXP_8x32(SGEMM8x32_ROWS_KSTEP_EMBEDDED, EXP_TAB16, 8, exptab<>(SB))

// func scoresExp8x32Base2Broadcast(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
// 2^(tile - shift), scores, shifts, limits and biases in base 2 (EXP2_TAB32), VBROADCASTSS.
TEXT ·scoresExp8x32Base2Broadcast(SB), NOSPLIT, $0-136
	SCORES_EXP_8x32(SGEMM8x32_ROWS_KSTEP, EXP2_TAB32, 48, exptab32<>(SB))

// func scoresExp8x32Base2Embedded(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
// 2^(tile - shift), scores, shifts, limits and biases in base 2 (EXP2_TAB32), broadcasts in the products' memory operands.
TEXT ·scoresExp8x32Base2Embedded(SB), NOSPLIT, $0-136
	SCORES_EXP_8x32(SGEMM8x32_ROWS_KSTEP_EMBEDDED, EXP2_TAB32, 48, exptab32<>(SB))

// func scoresExpBF16x32Broadcast(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
// exp in natural units (EXP_BF16_MEM), VPBROADCASTD.
TEXT ·scoresExpBF16x32Broadcast(SB), NOSPLIT, $0-120
	SCORES_EXP_BF16(BF16_8x32_ROWS_KSTEP, EXP_BF16_MEM)

// func scoresExpBF16x32Embedded(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
// exp in natural units (EXP_BF16_MEM), broadcasts in the products' memory operands.
TEXT ·scoresExpBF16x32Embedded(SB), NOSPLIT, $0-120
	SCORES_EXP_BF16(BF16_8x32_ROWS_KSTEP_EMBEDDED, EXP_BF16_MEM)

// func scoresExpBF16x32Base2Broadcast(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
// 2^x in base 2 (EXP2_BF16_MEM), VPBROADCASTD.
TEXT ·scoresExpBF16x32Base2Broadcast(SB), NOSPLIT, $0-120
	SCORES_EXP_BF16(BF16_8x32_ROWS_KSTEP, EXP2_BF16_MEM)

// func scoresExpBF16x32Base2Embedded(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
// 2^x in base 2 (EXP2_BF16_MEM), broadcasts in the products' memory operands.
TEXT ·scoresExpBF16x32Base2Embedded(SB), NOSPLIT, $0-120
	SCORES_EXP_BF16(BF16_8x32_ROWS_KSTEP_EMBEDDED, EXP2_BF16_MEM)

// TRANSPOSE16 loads 16 rows of 16 floats from SI, R9 bytes apart (SI
// advances to the last row), and leaves column i of the block in Zi;
// Z16-Z31 are clobbered.
#define TRANSPOSE16 \
	VMOVUPS (SI), Z0; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z1; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z2; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z3; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z4; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z5; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z6; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z7; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z8; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z9; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z10; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z11; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z12; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z13; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z14; \
	ADDQ R9, SI; \
	VMOVUPS (SI), Z15; \
	VUNPCKLPS Z1, Z0, Z16; \
	VUNPCKHPS Z1, Z0, Z17; \
	VUNPCKLPS Z3, Z2, Z18; \
	VUNPCKHPS Z3, Z2, Z19; \
	VUNPCKLPS Z5, Z4, Z20; \
	VUNPCKHPS Z5, Z4, Z21; \
	VUNPCKLPS Z7, Z6, Z22; \
	VUNPCKHPS Z7, Z6, Z23; \
	VUNPCKLPS Z9, Z8, Z24; \
	VUNPCKHPS Z9, Z8, Z25; \
	VUNPCKLPS Z11, Z10, Z26; \
	VUNPCKHPS Z11, Z10, Z27; \
	VUNPCKLPS Z13, Z12, Z28; \
	VUNPCKHPS Z13, Z12, Z29; \
	VUNPCKLPS Z15, Z14, Z30; \
	VUNPCKHPS Z15, Z14, Z31; \
	VUNPCKLPD Z18, Z16, Z0; \
	VUNPCKHPD Z18, Z16, Z1; \
	VUNPCKLPD Z19, Z17, Z2; \
	VUNPCKHPD Z19, Z17, Z3; \
	VUNPCKLPD Z22, Z20, Z4; \
	VUNPCKHPD Z22, Z20, Z5; \
	VUNPCKLPD Z23, Z21, Z6; \
	VUNPCKHPD Z23, Z21, Z7; \
	VUNPCKLPD Z26, Z24, Z8; \
	VUNPCKHPD Z26, Z24, Z9; \
	VUNPCKLPD Z27, Z25, Z10; \
	VUNPCKHPD Z27, Z25, Z11; \
	VUNPCKLPD Z30, Z28, Z12; \
	VUNPCKHPD Z30, Z28, Z13; \
	VUNPCKLPD Z31, Z29, Z14; \
	VUNPCKHPD Z31, Z29, Z15; \
	VSHUFF32X4 $0x88, Z4, Z0, Z16; \
	VSHUFF32X4 $0x88, Z5, Z1, Z17; \
	VSHUFF32X4 $0x88, Z6, Z2, Z18; \
	VSHUFF32X4 $0x88, Z7, Z3, Z19; \
	VSHUFF32X4 $0xdd, Z4, Z0, Z20; \
	VSHUFF32X4 $0xdd, Z5, Z1, Z21; \
	VSHUFF32X4 $0xdd, Z6, Z2, Z22; \
	VSHUFF32X4 $0xdd, Z7, Z3, Z23; \
	VSHUFF32X4 $0x88, Z12, Z8, Z24; \
	VSHUFF32X4 $0x88, Z13, Z9, Z25; \
	VSHUFF32X4 $0x88, Z14, Z10, Z26; \
	VSHUFF32X4 $0x88, Z15, Z11, Z27; \
	VSHUFF32X4 $0xdd, Z12, Z8, Z28; \
	VSHUFF32X4 $0xdd, Z13, Z9, Z29; \
	VSHUFF32X4 $0xdd, Z14, Z10, Z30; \
	VSHUFF32X4 $0xdd, Z15, Z11, Z31; \
	VSHUFF32X4 $0x88, Z24, Z16, Z0; \
	VSHUFF32X4 $0x88, Z25, Z17, Z1; \
	VSHUFF32X4 $0x88, Z26, Z18, Z2; \
	VSHUFF32X4 $0x88, Z27, Z19, Z3; \
	VSHUFF32X4 $0x88, Z28, Z20, Z4; \
	VSHUFF32X4 $0x88, Z29, Z21, Z5; \
	VSHUFF32X4 $0x88, Z30, Z22, Z6; \
	VSHUFF32X4 $0x88, Z31, Z23, Z7; \
	VSHUFF32X4 $0xdd, Z24, Z16, Z8; \
	VSHUFF32X4 $0xdd, Z25, Z17, Z9; \
	VSHUFF32X4 $0xdd, Z26, Z18, Z10; \
	VSHUFF32X4 $0xdd, Z27, Z19, Z11; \
	VSHUFF32X4 $0xdd, Z28, Z20, Z12; \
	VSHUFF32X4 $0xdd, Z29, Z21, Z13; \
	VSHUFF32X4 $0xdd, Z30, Z22, Z14; \
	VSHUFF32X4 $0xdd, Z31, Z23, Z15

// func TransposeScale16(dst *float32, ldd int, src *float32, lds int, scale *float32)
// dst[i·ldd + j] = scale[i]·src[j·lds + i] for i, j < 16: src's 16 rows in
// Z0-Z15, transposed in registers (unpack pairs of singles, then of
// doubles, then two shuffles of 128-bit lanes), column i ending in Z(i).
TEXT ·TransposeScale16(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), R9
	MOVQ scale+32(FP), BX
	SHLQ $2, R8
	SHLQ $2, R9
	TRANSPOSE16
	VMULPS.BCST 0(BX), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ R8, DI
	VMULPS.BCST 4(BX), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ R8, DI
	VMULPS.BCST 8(BX), Z2, Z2
	VMOVUPS Z2, (DI)
	ADDQ R8, DI
	VMULPS.BCST 12(BX), Z3, Z3
	VMOVUPS Z3, (DI)
	ADDQ R8, DI
	VMULPS.BCST 16(BX), Z4, Z4
	VMOVUPS Z4, (DI)
	ADDQ R8, DI
	VMULPS.BCST 20(BX), Z5, Z5
	VMOVUPS Z5, (DI)
	ADDQ R8, DI
	VMULPS.BCST 24(BX), Z6, Z6
	VMOVUPS Z6, (DI)
	ADDQ R8, DI
	VMULPS.BCST 28(BX), Z7, Z7
	VMOVUPS Z7, (DI)
	ADDQ R8, DI
	VMULPS.BCST 32(BX), Z8, Z8
	VMOVUPS Z8, (DI)
	ADDQ R8, DI
	VMULPS.BCST 36(BX), Z9, Z9
	VMOVUPS Z9, (DI)
	ADDQ R8, DI
	VMULPS.BCST 40(BX), Z10, Z10
	VMOVUPS Z10, (DI)
	ADDQ R8, DI
	VMULPS.BCST 44(BX), Z11, Z11
	VMOVUPS Z11, (DI)
	ADDQ R8, DI
	VMULPS.BCST 48(BX), Z12, Z12
	VMOVUPS Z12, (DI)
	ADDQ R8, DI
	VMULPS.BCST 52(BX), Z13, Z13
	VMOVUPS Z13, (DI)
	ADDQ R8, DI
	VMULPS.BCST 56(BX), Z14, Z14
	VMOVUPS Z14, (DI)
	ADDQ R8, DI
	VMULPS.BCST 60(BX), Z15, Z15
	VMOVUPS Z15, (DI)
	VZEROUPPER
	RET

// func TransposeAdd16(dst *float32, ldd int, src *float32, lds int, scale float32)
// dst[i·ldd + j] += scale·src[j·lds + i] for i, j < 16 (strides in
// floats; lds may be 0: every row of src the same).
TEXT ·TransposeAdd16(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), R9
	SHLQ $2, R8
	SHLQ $2, R9
	TRANSPOSE16
	VBROADCASTSS scale+32(FP), Z17
	VMOVUPS (DI), Z16
	VFMADD231PS Z0, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z1, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z2, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z3, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z4, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z5, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z6, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z7, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z8, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z9, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z10, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z11, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z12, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z13, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z14, Z17, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	VMOVUPS (DI), Z16
	VFMADD231PS Z15, Z17, Z16
	VMOVUPS Z16, (DI)
	VZEROUPPER
	RET

// func PackSlivers8(dst, src *float32, lds, rows, slivers, ldsliver int)
// The fused attention's Vᵀ pack: row r's 8·slivers floats at src + r·lds
// go to dst + s·ldsliver + r·8, 8 at a time; two slivers per 64-byte load.
TEXT ·PackSlivers8(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), R8
	MOVQ rows+24(FP), CX
	MOVQ ldsliver+40(FP), R11
	SHLQ $2, R8
	SHLQ $2, R11
	TESTQ CX, CX
	JE pvdone
pvrow:
	MOVQ slivers+32(FP), DX
	MOVQ SI, R9
	MOVQ DI, R10
	SHRQ $1, DX
	JE pvodd
pvpair:
	VMOVUPS (R9), Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMOVUPS Y0, (R10)
	VMOVUPS Y1, (R10)(R11*1)
	ADDQ $64, R9
	LEAQ (R10)(R11*2), R10
	DECQ DX
	JNZ pvpair
pvodd:
	MOVQ slivers+32(FP), DX
	TESTQ $1, DX
	JE pvnext
	VMOVUPS (R9), Y0
	VMOVUPS Y0, (R10)
pvnext:
	ADDQ R8, SI
	ADDQ $32, DI
	DECQ CX
	JNZ pvrow
pvdone:
	VZEROUPPER
	RET

// func PrefetchRowsL2(p *float32, rows, stride, lines int)
// PREFETCHT1 of lines 64-byte lines from p, p + stride, ... (rows rows,
// stride in floats).
TEXT ·PrefetchRowsL2(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ rows+8(FP), CX
	MOVQ stride+16(FP), R8
	MOVQ lines+24(FP), DX
	SHLQ $2, R8
	TESTQ CX, CX
	JE pfrdone
	TESTQ DX, DX
	JE pfrdone
pfrrow:
	MOVQ SI, AX
	MOVQ DX, BX
pfrline:
	PREFETCHT1 (AX)
	ADDQ $64, AX
	DECQ BX
	JNZ pfrline
	ADDQ R8, SI
	DECQ CX
	JNZ pfrrow
pfrdone:
	RET
