package kernel

import "golang.org/x/sys/cpu"

// Available reports whether Sgemm6x16 can run on this CPU (AVX2 and FMA).
var Available = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// Sgemm6x16 adds to C[0:6, 0:16] (row stride ldc elements), or stores into
// it when add is false, the product of a packed k×6 sliver of A
// (a[p*6+r] = A[r][p]) and a packed k×16 sliver of B (b[p*16+j] = B[p][j]).
// The caller guarantees that the memory exists.
//
//go:noescape
func Sgemm6x16(k int, a, b, c *float32, ldc int, add bool)

// ExpShiftSum8 sets dst[i] = exp(src[i] - shift) for the first n elements,
// n a multiple of 8, and returns their sum. It needs AVX2 and FMA
// (Available). The relative error is below 5e-7; NaN propagates; arguments
// are clamped to [ExpClampLow, ExpClampHigh].
//
//go:noescape
func ExpShiftSum8(dst, src *float32, n int, shift float32) float32

// MaxCols16 sets mx[c] = max(mx[c], src[r*16+c]) for the n rows of 16
// columns at src. It needs AVX2 (Available).
//
//go:noescape
func MaxCols16(src *float32, n int, mx *float32)

// ExpShiftSumCols16 replaces each of the n rows of 16 columns at p by
// p[r*16+c] = exp(p[r*16+c] - shift[c]) and adds each column's sum to
// sum[c] (shift and sum have 16 elements). Accuracy and clamping are
// ExpShiftSum8's. It needs AVX2 and FMA (Available).
//
//go:noescape
func ExpShiftSumCols16(p *float32, n int, shift, sum *float32)

// AVX512 reports whether the AVX-512 kernels (Sgemm8x32, Sgemm12x32, Sgemm8x32Rows,
// MaxCols32, ExpShiftSumCols32) can run: AVX-512F with OS support for the
// ZMM state, and the AVX2+FMA of Available.
var AVX512 = Available && cpu.X86.HasAVX512F

// Sgemm8x32 is Sgemm6x16 for an 8×32 tile with AVX-512: it adds to (or,
// when add is false, stores into) C[0:8, 0:32] the product of a packed k×8
// sliver of A (a[p*8+r]) and a packed k×32 sliver of B (b[p*32+j]).
//
//go:noescape
func Sgemm8x32(k int, a, b, c *float32, ldc int, add bool)

// Sgemm12x32 is Sgemm8x32 for a 12×32 tile (a[p*12+r]).
//
//go:noescape
func Sgemm12x32(k int, a, b, c *float32, ldc int, add bool)

// MaxCols32 is MaxCols16 for rows of 32 columns, with AVX-512.
//
//go:noescape
func MaxCols32(src *float32, n int, mx *float32)

// MulCols32 sets p[r*32+c] *= v[c] for n rows of 32 columns, with
// AVX-512, the same values as Go's float32 multiplication (a NaN's
// payload aside): the fused attention rescales its probabilities and
// accumulator with it where running shifts move.
//
//go:noescape
func MulCols32(p *float32, n int, v *float32)

// ExpShiftSumCols32 is ExpShiftSumCols16 for rows of 32 columns, with
// AVX-512.
//
//go:noescape
func ExpShiftSumCols32(p *float32, n int, shift, sum *float32)

// Sgemm8x32Loop runs n Sgemm8x32 tiles in one call: tile t reads its A
// sliver at a + t·as, its B sliver at b + t·bs and adds to (or stores into)
// the tile of C at c + t·cs (strides in elements; ldc is C's row stride).
// A's k step p is the 8 floats at a + p·lda: lda 8 is a packed sliver, a
// larger lda reads 8 consecutive columns of a row-major matrix in place.
// It saves the per-tile call for fused kernels that sweep many tiles with
// a short k.
//
//go:noescape
func Sgemm8x32Loop(k int, a, b, c *float32, lda, ldc, n, as, bs, cs int, add bool)

// BF16 reports whether the bf16 kernels (DotBF16Peak512 and the
// BF16Gemm micro-kernels) can run: AVX512_BF16 (CPUID leaf 7 subleaf 1,
// EAX bit 5) and AVX512BW (ScoresExpBF16x32's VPERMW; every CPU with
// AVX512_BF16 has it) besides AVX512.
var BF16 = AVX512 && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512BF16

// FMAPeak512 runs n iterations of 24 independent VFMADD231PS on ZMM
// registers (768 flops each) with no memory operands: the FP pipes'
// fp32 throughput, the roofline's ceiling. It needs AVX512.
//
//go:noescape
func FMAPeak512(n int)

// FMAPeak256 is FMAPeak512 on YMM registers (384 flops an iteration),
// for AVX2+FMA CPUs (Available).
//
//go:noescape
func FMAPeak256(n int)

// DotBF16Peak512 runs n iterations of 24 independent VDPBF16PS on ZMM
// registers (1536 flops each: every fp32 lane adds two bf16 products).
// It needs BF16.
//
//go:noescape
func DotBF16Peak512(n int)

// BF16Gemm8x32 computes an 8×32 tile of C (row stride ldc) from bf16
// operands with fp32 accumulation: C = acc (add false) or C += acc, then
// C += bias (32 floats, every row) when bias is not nil. acc is the
// product of 8 rows of A and a packed sliver of B over k pairs of
// elements (2k of the product's inner dimension):
// A's row r holds its k pairs as 32-bit words at a + r·lda (word p is
// bf16 elements 2p and 2p+1, low half first), and b[p·32 + j] is the pair
// (B[2p][j], B[2p+1][j]). Each product of two bf16 is exact in fp32 and
// each sum rounds to nearest even (VDPBF16PS; subnormal inputs and
// results are flushed to zero). It prefetches pf's pfLines lines as
// Sgemm8x32Rows does (k counts pairs here: one line every 8 pairs). It
// needs BF16.
//
// It runs the form EmbeddedBroadcast picks.
func BF16Gemm8x32(k int, a *uint32, lda int, b *uint32, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int) {
	if EmbeddedBroadcast {
		bf16Gemm8x32Embedded(k, a, lda, b, c, ldc, bias, add, pf, pfLines)
		return
	}
	bf16Gemm8x32Broadcast(k, a, lda, b, c, ldc, bias, add, pf, pfLines)
}

// CvtBF16 rounds n floats at src (n a multiple of 32) to bf16, nearest
// even (VCVTNE2PS2BF16: NaN stays NaN, quieted; subnormals become zero),
// and stores them as n/2 words at dst: word w holds src[2w] in its low
// half and src[2w+1] in its high half. It needs BF16.
//
//go:noescape
func CvtBF16(dst *uint32, src *float32, n int)

// Sgemm8x32Rows is Sgemm8x32 reading A's 8 rows in place: row r's k
// elements are consecutive at a + r·lda (no packing), and B is a packed
// k×32 sliver. It stores C = A·B (add false) or adds it (add), then adds
// bias (32 floats, every row) when bias is not nil. Meanwhile it asks for
// the pfLines cache lines from pf on (64 bytes each; pf may be nil when
// pfLines is 0) to be brought into L2 (PREFETCHT1), one line every 8 k
// steps, at most k/8 of them: the GEMM hands it the next B sliver's
// lines, which come from memory when a model's weights do not fit in the
// caches. A prefetch never faults; it only has to point into memory the
// caller owns to be useful. Before the products it asks for its own tile
// of C the same way: an output the caches have lost (a deep model's
// activations, evicted by its weights) otherwise made the stores wait on
// memory, worst where C's rows are a multiple of 4 KiB apart and a tile's
// 16 lines share one L1 set (outputs 3072 columns wide: SgemmPacked on 2 threads, 24
// output buffers cycled against one reused, 2-core Zen 5 VM, 2026-11-24
// about 18:10 UTC: 0.87–0.92× of the reused buffer's rate before, 0.98–1.00×
// with the prefetch; 128×768·768×3072 with cold C 475–477 → 523–542
// GFLOP/s, at 512 rows 471–485 → 521–527).
//
// It runs the form EmbeddedBroadcast picks.
func Sgemm8x32Rows(k int, a *float32, lda int, b, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int) {
	if EmbeddedBroadcast {
		sgemm8x32RowsEmbedded(k, a, lda, b, c, ldc, bias, add, pf, pfLines)
		return
	}
	sgemm8x32RowsBroadcast(k, a, lda, b, c, ldc, bias, add, pf, pfLines)
}

// BF16Gemm8x32Loop runs n BF16Gemm8x32 tiles (without bias) in one call:
// tile t reads A's rows at a + t·as and B at b + t·bs (in words) and
// stores into (or, with add, adds to) the tile of C at c + t·cs (floats).
// It saves the per-tile call for fused kernels sweeping many short tiles.
//
// It runs the form EmbeddedBroadcast picks.
func BF16Gemm8x32Loop(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool) {
	if EmbeddedBroadcast {
		bf16Gemm8x32LoopEmbedded(k, a, lda, b, c, ldc, n, as, bs, cs, add)
		return
	}
	bf16Gemm8x32LoopBroadcast(k, a, lda, b, c, ldc, n, as, bs, cs, add)
}

// PairRowsBF16x32 rounds rows of 32 floats at src to bf16 (nearest even)
// and pairs consecutive rows: dst[p·32 + j] holds src row 2p's column j
// in its low half and row 2p+1's in its high half (zero past the last of
// an odd count of rows): the k pairs of a B operand whose k runs down the
// rows. It writes ⌈rows/2⌉·32 words. It needs BF16.
//
//go:noescape
func PairRowsBF16x32(dst *uint32, src *float32, rows int)

// Sgemm8x32RowsLoop runs n Sgemm8x32Rows tiles (without bias) in one
// call: tile t reads A's rows at a + t·as and B at b + t·bs and stores
// into (or, with add, adds to) the tile of C at c + t·cs (all strides in
// floats). Fused kernels use it to read operands in place.
//
// It runs the form EmbeddedBroadcast picks.
func Sgemm8x32RowsLoop(k int, a *float32, lda int, b, c *float32, ldc, n, as, bs, cs int, add bool) {
	if EmbeddedBroadcast {
		sgemm8x32RowsLoopEmbedded(k, a, lda, b, c, ldc, n, as, bs, cs, add)
		return
	}
	sgemm8x32RowsLoopBroadcast(k, a, lda, b, c, ldc, n, as, bs, cs, add)
}

// GatherScale32 transposes and scales a 32-row block: dst[j·32 + c] =
// scale·src[c·lds + j] for rows c < 32 and columns j < n (lds in floats;
// 31·lds must fit in an int32). It packs B panels of 32 columns from a
// row-major matrix (the attention's scale·Qᵀ) with gathers instead of
// element-by-element copies. It needs AVX512.
//
//go:noescape
func GatherScale32(dst, src *float32, lds, n int, scale float32)

// GatherPairsBF16x32 packs k pairs of 32 rows as a bf16 B panel:
// dst[p·32 + c] = (scale·src[c·lds + 2p], scale·src[c·lds + 2p + 1]),
// rounded to bf16, for rows c < 32 and pairs p < pairs (lds in floats;
// 31·lds must fit in an int32). It needs BF16.
//
//go:noescape
func GatherPairsBF16x32(dst *uint32, src *float32, lds, pairs int, scale float32)

// BF16Gemm8x32LoopA8 is BF16Gemm8x32Loop with A in slivers: A's k pair p
// is the 8 rows' words at a + p·lda (lda 8: a packed sliver).
//
//go:noescape
func BF16Gemm8x32LoopA8(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool)

// PairSliversBF16 packs pairs of rows as bf16 A slivers of 8 columns
// (the layout BF16Gemm8x32LoopA8 reads with lda 8): for pairs p < pairs
// and columns j < 8·slivers (slivers even),
// dst[(j/8)·ldsliver + p·8 + j%8] = (src[2p·lds + j], src[(2p+1)·lds + j]),
// rounded to bf16. It needs BF16.
//
//go:noescape
func PairSliversBF16(dst *uint32, src *float32, lds, pairs, slivers, ldsliver int)

// PackSlivers8 packs rows of floats as A slivers of 8 columns (the
// fused attention's Vᵀ, the layout Sgemm8x32Loop reads with lda 8): for
// rows r < rows and columns j < 8·slivers,
// dst[(j/8)·ldsliver + r·8 + j%8] = src[r·lds + j] (lds and ldsliver in
// floats). It needs AVX512.
//
//go:noescape
func PackSlivers8(dst, src *float32, lds, rows, slivers, ldsliver int)

// Erf16 sets dst[i] = erf(src[i]), or with gelu Gelu's 0.5·x·(1 +
// erf(x/√2)), for n elements (n a multiple of 16), with AVX-512 (AVX512).
// dst may be src. Package ops describes the approximation (erf.go): at
// most 2 ulp from the exact erf; NaN stays NaN, ±Inf give ±1.
//
//go:noescape
func Erf16(dst, src *float32, n int, gelu bool)

// Erf8 is Erf16 on 8 lanes with AVX2 and FMA (Available), n a multiple of
// 8; it gives the same results.
//
//go:noescape
func Erf8(dst, src *float32, n int, gelu bool)

// ScoresExp8x32 is Sgemm8x32RowsLoop (n tiles of A's 8 rows in place at a
// + t·as, lda apart, times the packed k×32 panel b, stored at c + t·cs
// with row stride ldc) with the streaming softmax in its epilogue: tile t
// is stored as exp(tile - shift[col]) and its columns' sums are added to
// sum[col] (shift, limit and sum hold 32 floats). Before that, when some
// column's maximum over the tile's 8 rows exceeds limit[col] (the caller
// picks each limit above its shift so that exp stays far from overflow),
// it writes the tile's 32 column maxima to mx, stores nothing of tile t
// and returns t; it returns n when every tile is done. A shift of -Inf
// subtracts 0 (-Inf scores give 0; with a limit of -Inf, a finite one
// stops the kernel). The exponential is within 1.5 ulp of exp(tile -
// shift) (the difference rounded to float32), plus 2.8e-9 relative per
// unit of |tile - shift| (ln 2 in float32: 0.8 ulp more at -16);
// arguments below -104, -Inf included, give 0; NaN stays NaN. It needs
// AVX512. A bias that is not nil holds one float per row of every tile
// (8n floats): tile t's row r gets bias[8t+r] added to its 32 scores
// before the maxima and the exponential (a per-key mask: 0 or -Inf, or an
// additive mask's values, broadcast to the queries). A row bias rb that is
// not nil adds to row r of tile t the 32 floats at rb + (8t+r)·rbs, after
// the bias: a term of each (key, query) pair, such as a bias by its
// diagonals (rbs -1: row r+1's terms start a float before row r's).
//
// It runs the form EmbeddedBroadcast picks.
func ScoresExp8x32(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int {
	if EmbeddedBroadcast {
		return scoresExp8x32Embedded(k, a, lda, b, c, ldc, n, as, cs, shift, limit, sum, mx, bias, rb, rbs)
	}
	return scoresExp8x32Broadcast(k, a, lda, b, c, ldc, n, as, cs, shift, limit, sum, mx, bias, rb, rbs)
}

// ScoresExp8x32Base2 is ScoresExp8x32 in base 2: the caller scales the
// panel b by log2 e (scores x·log2 e) and gives shifts, limits and both
// biases in the same units; tile t is stored as 2^(tile - shift[col]), which is
// exp of the scores in natural units. Its exponential takes half the
// FMA-pipe operations of ScoresExp8x32's (no multiply by log2 e, no ln 2
// in the reduction, a 32-entry table and a degree-2 polynomial) and is
// within 1.75 ulp of 2^(tile - shift) (the difference rounded to
// float32); arguments below -150, -Inf included, give 0; NaN stays NaN.
// The bias must be 0 and -Inf only where the caller also computes scores
// of the same rows in natural units: converting a large finite offset (an
// additive mask's -1e4, or float32's minimum, which overflows) to base 2
// rounds it apart from its natural-unit counterpart. It needs AVX512.
//
// It runs the form EmbeddedBroadcast picks.
func ScoresExp8x32Base2(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int {
	if EmbeddedBroadcast {
		return scoresExp8x32Base2Embedded(k, a, lda, b, c, ldc, n, as, cs, shift, limit, sum, mx, bias, rb, rbs)
	}
	return scoresExp8x32Base2Broadcast(k, a, lda, b, c, ldc, n, as, cs, shift, limit, sum, mx, bias, rb, rbs)
}

// ScoresExpBF16x32 is ScoresExp8x32 on bf16 operands, in natural units
// (scores, shifts, limits and bias), with its probabilities stored as the
// bf16 pairs the P·V product reads: n tiles of A's 8 rows of k pair words
// (lda words apart; tile t at a + t·as) times the packed k-pair×32 panel
// b (VDPBF16PS, fp32 sums), with the same bias and row bias (fp32), maxima, stop at the first
// tile a column of which rises above its limit (mx, return t) and sums;
// tile t's exp(tile - shift) go to the 128 words at c + 128t, rows 2p and
// 2p+1 of the tile as words c[128t + 32p + col] = (row 2p, row 2p+1)
// rounded to bf16 (nearest even), the even row in the low half
// (PairRowsBF16x32's layout). Its exponential is a cheaper polynomial
// than ScoresExp8x32's, within 1.02e-4 relative (the rounding to bf16 that
// follows is up to 2^-9): the sums are of these fp32 values, before the
// rounding. The exponentials of a tile run during the next tile's
// products, from the tile staged raw at its own words and the next
// tile's: c must have room for 128 words past the last tile it stores
// (or past the tile it stops at), which it leaves undefined. It needs
// BF16.
//
// It runs the form EmbeddedBroadcast picks.
func ScoresExpBF16x32(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int {
	if EmbeddedBroadcast {
		return scoresExpBF16x32Embedded(k, a, lda, b, c, n, as, shift, limit, sum, mx, bias, rb, rbs)
	}
	return scoresExpBF16x32Broadcast(k, a, lda, b, c, n, as, shift, limit, sum, mx, bias, rb, rbs)
}

// ScoresExpBF16x32Base2 is ScoresExpBF16x32 in base 2, as
// ScoresExp8x32Base2 is ScoresExp8x32: the panel b holds scale·log2 e·Qᵀ,
// shifts, limits and bias are in base 2 (the bias 0 and -Inf only where
// the caller also works in natural units), the stored values are 2^(tile
// - shift). Its exponential is the same polynomial in base 2 (its
// coefficients times powers of ln 2, within 1.02e-4 relative) and takes
// three FMA-pipe operations where ScoresExpBF16x32's takes five. It needs
// BF16.
//
// It runs the form EmbeddedBroadcast picks.
func ScoresExpBF16x32Base2(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int {
	if EmbeddedBroadcast {
		return scoresExpBF16x32Base2Embedded(k, a, lda, b, c, n, as, shift, limit, sum, mx, bias, rb, rbs)
	}
	return scoresExpBF16x32Base2Broadcast(k, a, lda, b, c, n, as, shift, limit, sum, mx, bias, rb, rbs)
}

// TransposeScale16 writes the transpose of a 16×16 block, each row scaled:
// dst[i·ldd + j] = scale[i]·src[j·lds + i] for i, j < 16 (strides in
// floats). The fused attention packs scale·Qᵀ and writes its transposed
// accumulator into the output with it. It needs AVX512.
//
//go:noescape
func TransposeScale16(dst *float32, ldd int, src *float32, lds int, scale *float32)

// TransposeAdd16 adds the transpose of a 16×16 block, scaled:
// dst[i·ldd + j] += scale·src[j·lds + i] for i, j < 16 (strides in
// floats; lds 0 adds src's one row to every column). The fused attention
// adds an additive mask or bias, stored query-major, to its transposed
// scores panel with it. It needs AVX512.
//
//go:noescape
func TransposeAdd16(dst *float32, ldd int, src *float32, lds int, scale float32)

// RowMoments16 returns the float32 mean of x's n elements, then the sum
// of the deviations mean - x (sd, the mean's rounding error times -n) and
// of their squares (m2), each with 64 partial sums, with AVX-512 (AVX512);
// n a multiple of 16, at least 16. The exact mean is mean - sd/n and the
// sum of squared deviations from it m2 - sd²/n.
//
//go:noescape
func RowMoments16(x *float32, n int) (mean, sd, m2 float32)

// NormRow16 writes y = ((x - mu) + delta)·inv·scale + bias for n elements
// (n a multiple of 16), with AVX-512 (AVX512): mu the rounded mean,
// delta = sd/n its correction. y may be x.
//
//go:noescape
func NormRow16(y, x *float32, n int, mu, delta, inv float32, scale, bias *float32)

// Relu16 writes dst = max(src, 0) for n elements (n a multiple of 16)
// with AVX-512 (AVX512); NaN stays NaN. dst may be src.
//
//go:noescape
func Relu16(dst, src *float32, n int)

// Silu16 writes dst = x·σ(x), x = src, for n elements (any n ≥ 0) with
// AVX-512 (AVX512): bit for bit Sigmoid16 then a float32 multiply by x.
// dst may be src.
//
//go:noescape
func Silu16(dst, src *float32, n int)

// Sigmoid16 writes dst = 1/(1 + e^-src) for n elements (any n ≥ 0; the
// lanes past n of a last partial vector are neither read nor written)
// with AVX-512 (AVX512): within a few ulp of the exact logistic function;
// NaN stays NaN. dst may be src.
//
//go:noescape
func Sigmoid16(dst, src *float32, n int)

// SumSquaresF64 returns Σx² over any n ≥ 0 elements in float64 (each
// square exact, added in 32 partial sums), with AVX-512 (AVX512): the
// row sums of ReduceL2 and ReduceSumSquare.
//
//go:noescape
func SumSquaresF64(x *float32, n int) float64

// SumSquares16 returns Σx² over n elements (n a multiple of 16) in float32
// with 64 partial sums, with AVX-512 (AVX512).
//
//go:noescape
func SumSquares16(x *float32, n int) float32

// SinCos16 writes dst = sin(src), or cos(src) when cos, for n elements
// (any n ≥ 0) with AVX-512 (AVX512): within a few ulp of the
// exact value for |x| ≤ 1e6. It returns how many elements were beyond
// that or NaN, which the caller computes again.
//
//go:noescape
func SinCos16(dst, src *float32, n int, cos bool) int

// GeluTanh16 writes dst = x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))), x =
// src, for n elements (any n ≥ 0; lanes past n are neither read nor
// written) with AVX-512 (AVX512), in one pass as x/(1 + e^(-2u)); NaN
// stays NaN. dst may be src.
//
//go:noescape
func GeluTanh16(dst, src *float32, n int)

// Tanh16 writes dst = tanh(src) for n elements (any n ≥ 0) with AVX-512
// (AVX512): within a few ulp of the exact value; NaN stays NaN.
// dst may be src.
//
//go:noescape
func Tanh16(dst, src *float32, n int)

// AddVV, SubVV, MulVV and DivVV write dst[i] = a[i] op b[i] for n
// elements (any n ≥ 0) with AVX-512 (AVX512), bit for bit as Go's scalar
// float32 operation, NaN payloads included (a the first source). dst may
// be a or b.
//
//go:noescape
func AddVV(dst, a, b *float32, n int)

// AddRow32 writes dst[32r + c] = src[32r + c] + row[c] for rows rows of
// 32 floats (c < 32), bit for bit as Go's scalar float32 addition, with
// AVX-512 (AVX512): a row added to every row of a matrix 32 wide. dst may
// be src.
//
//go:noescape
func AddRow32(dst, src, row *float32, rows int)

// SubVV is AddVV's subtraction.
//
//go:noescape
func SubVV(dst, a, b *float32, n int)

// MulVV is AddVV's multiplication.
//
//go:noescape
func MulVV(dst, a, b *float32, n int)

// DivVV is AddVV's division.
//
//go:noescape
func DivVV(dst, a, b *float32, n int)

// AddVS, SubVS, MulVS and DivVS write dst[i] = a[i] op b for n elements
// (any n ≥ 0) with AVX-512 (AVX512), bit for bit as Go's scalar float32
// operation, NaN payloads included (a[i] the first source). dst may be a.
// a + b and a·b with a scalar a are AddVS and MulVS with the operands
// swapped, which is how Go's compiler orders them too.
//
//go:noescape
func AddVS(dst, a *float32, b float32, n int)

// SubVS is AddVS's subtraction.
//
//go:noescape
func SubVS(dst, a *float32, b float32, n int)

// PrefetchRowsL2 asks for lines 64-byte lines at each of rows rows into L2
// (PREFETCHT1): row r's at p + r·stride floats. The fused attention asks
// for its next item's query and output rows with it while the current item
// runs.
//
//go:noescape
func PrefetchRowsL2(p *float32, rows, stride, lines int)

// MulVS is AddVS's multiplication.
//
//go:noescape
func MulVS(dst, a *float32, b float32, n int)

// DivVS is AddVS's division.
//
//go:noescape
func DivVS(dst, a *float32, b float32, n int)

// SubSV and DivSV write dst[i] = a op b[i] for n elements (any n ≥ 0)
// with AVX-512 (AVX512), bit for bit as Go's scalar float32 operation, NaN
// payloads included (a the first source). dst may be b.
//
//go:noescape
func SubSV(dst *float32, a float32, b *float32, n int)

// DivSV is SubSV's division.
//
//go:noescape
func DivSV(dst *float32, a float32, b *float32, n int)

// DotRows16 writes dst[j] = Σ_{c<d} q[c]·k[j·ldk + c] for j < n (ldk in
// floats; d a multiple of 16), summed in float32 in 16 lanes, with AVX-512
// (AVX512): a query row's scores against n keys in place.
//
//go:noescape
func DotRows16(dst, q, k *float32, ldk, n, d int)

// AxpyRows16 adds Σ_{j<n} p[j]·v[j·ldv + c] to o[c] for c < dv (ldv in
// floats; dv a multiple of 16), with AVX-512 (AVX512): a row's weights
// times n value rows in place.
//
//go:noescape
func AxpyRows16(o, p, v *float32, ldv, n, dv int)
