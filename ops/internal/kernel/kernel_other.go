//go:build !amd64

package kernel

// Available is false: only amd64 has an assembly micro-kernel.
const Available = false

// Sgemm6x16 is never called where Available is false.
func Sgemm6x16(k int, a, b, c *float32, ldc int, add bool) {
	panic("blas/internal/kernel: no assembly micro-kernel on this architecture")
}

// ExpShiftSum8 is never called where Available is false.
func ExpShiftSum8(dst, src *float32, n int, shift float32) float32 {
	panic("ops/internal/kernel: no assembly exp on this architecture")
}

// MaxCols16 is never called where Available is false.
func MaxCols16(src *float32, n int, mx *float32) {
	panic("ops/internal/kernel: no assembly max on this architecture")
}

// ExpShiftSumCols16 is never called where Available is false.
func ExpShiftSumCols16(p *float32, n int, shift, sum *float32) {
	panic("ops/internal/kernel: no assembly exp on this architecture")
}

// AVX512 is false: only amd64 has the AVX-512 kernels.
const AVX512 = false

// EmbeddedBroadcast is false: there are no 8×32 row kernels here.
const EmbeddedBroadcast = false

// Sgemm8x32 is never called where AVX512 is false.
func Sgemm8x32(k int, a, b, c *float32, ldc int, add bool) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// Sgemm12x32 is never called where AVX512 is false.
func Sgemm12x32(k int, a, b, c *float32, ldc int, add bool) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// MaxCols32 is never called where AVX512 is false.
func MaxCols32(src *float32, n int, mx *float32) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// MulCols32 is never called where AVX512 is false.
func MulCols32(p *float32, n int, v *float32) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// ExpShiftSumCols32 is never called where AVX512 is false.
func ExpShiftSumCols32(p *float32, n int, shift, sum *float32) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// Sgemm8x32Loop is never called where AVX512 is false.
func Sgemm8x32Loop(k int, a, b, c *float32, lda, ldc, n, as, bs, cs int, add bool) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// BF16 is false: only amd64 has the bf16 kernels.
const BF16 = false

// FMAPeak512 is never called where AVX512 is false.
func FMAPeak512(n int) { panic("ops/internal/kernel: no AVX-512 on this architecture") }

// FMAPeak256 is never called where Available is false.
func FMAPeak256(n int) { panic("ops/internal/kernel: no AVX2 on this architecture") }

// DotBF16Peak512 is never called where BF16 is false.
func DotBF16Peak512(n int) { panic("ops/internal/kernel: no AVX512_BF16 on this architecture") }

// BF16Gemm8x32 is never called where BF16 is false.
func BF16Gemm8x32(k int, a *uint32, lda int, b *uint32, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int) {
	panic("ops/internal/kernel: no AVX512_BF16 on this architecture")
}

// CvtBF16 is never called where BF16 is false.
func CvtBF16(dst *uint32, src *float32, n int) {
	panic("ops/internal/kernel: no AVX512_BF16 on this architecture")
}

// Sgemm8x32Rows is never called where AVX512 is false.
func Sgemm8x32Rows(k int, a *float32, lda int, b, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// BF16Gemm8x32Loop is never called where BF16 is false.
func BF16Gemm8x32Loop(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool) {
	panic("ops/internal/kernel: no AVX512_BF16 on this architecture")
}

// PairRowsBF16x32 is never called where BF16 is false.
func PairRowsBF16x32(dst *uint32, src *float32, rows int) {
	panic("ops/internal/kernel: no AVX512_BF16 on this architecture")
}

// Sgemm8x32RowsLoop is never called where AVX512 is false.
func Sgemm8x32RowsLoop(k int, a *float32, lda int, b, c *float32, ldc, n, as, bs, cs int, add bool) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// GatherScale32 is never called where AVX512 is false.
func GatherScale32(dst, src *float32, lds, n int, scale float32) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// GatherPairsBF16x32 is never called where BF16 is false.
func GatherPairsBF16x32(dst *uint32, src *float32, lds, pairs int, scale float32) {
	panic("ops/internal/kernel: no AVX512_BF16 on this architecture")
}

// BF16Gemm8x32LoopA8 is never called where BF16 is false.
func BF16Gemm8x32LoopA8(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool) {
	panic("ops/internal/kernel: no AVX512_BF16 on this architecture")
}

// PairSliversBF16 is never called where BF16 is false.
func PairSliversBF16(dst *uint32, src *float32, lds, pairs, slivers, ldsliver int) {
	panic("ops/internal/kernel: no AVX512_BF16 on this architecture")
}

// PackSlivers8 is never called where AVX512 is false.
func PackSlivers8(dst, src *float32, lds, rows, slivers, ldsliver int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// Erf16 is never called where AVX512 is false.
func Erf16(dst, src *float32, n int, gelu bool) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// Erf8 is never called where Available is false.
func Erf8(dst, src *float32, n int, gelu bool) {
	panic("ops/internal/kernel: no assembly erf on this architecture")
}

// ScoresExp8x32 is never called where AVX512 is false.
func ScoresExp8x32(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// ScoresExp8x32Base2 is never called where AVX512 is false.
func ScoresExp8x32Base2(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// ScoresExpBF16x32 is never called where BF16 is false.
func ScoresExpBF16x32(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int {
	panic("ops/internal/kernel: no AVX512_BF16 on this architecture")
}

// ScoresExpBF16x32Base2 is never called where BF16 is false.
func ScoresExpBF16x32Base2(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int {
	panic("ops/internal/kernel: no AVX512_BF16 on this architecture")
}

// TransposeScale16 is never called where AVX512 is false.
func TransposeScale16(dst *float32, ldd int, src *float32, lds int, scale *float32) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// TransposeAdd16 is never called where AVX512 is false.
func TransposeAdd16(dst *float32, ldd int, src *float32, lds int, scale float32) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// RowMoments16 is never called where AVX512 is false.
func RowMoments16(x *float32, n int) (mean, sd, m2 float32) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// NormRow16 is never called where AVX512 is false.
func NormRow16(y, x *float32, n int, mu, delta, inv float32, scale, bias *float32) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// Relu16 is never called where AVX512 is false.
func Relu16(dst, src *float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// Silu16 is never called where AVX512 is false.
func Silu16(dst, src *float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// Sigmoid16 is never called where AVX512 is false.
func Sigmoid16(dst, src *float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// SumSquares16 is never called where AVX512 is false.
func SumSquares16(x *float32, n int) float32 {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// SinCos16 is never called where AVX512 is false.
func SinCos16(dst, src *float32, n int, cos bool) int {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// GeluTanh16 is never called where AVX512 is false.
func GeluTanh16(dst, src *float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// Tanh16 is never called where AVX512 is false.
func Tanh16(dst, src *float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// AddRow32 is never called where AVX512 is false.
func AddRow32(dst, src, row *float32, rows int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// AddVV is never called where AVX512 is false.
func AddVV(dst, a, b *float32, n int) { panic("ops/internal/kernel: no AVX-512 on this architecture") }

// SubVV is never called where AVX512 is false.
func SubVV(dst, a, b *float32, n int) { panic("ops/internal/kernel: no AVX-512 on this architecture") }

// MulVV is never called where AVX512 is false.
func MulVV(dst, a, b *float32, n int) { panic("ops/internal/kernel: no AVX-512 on this architecture") }

// DivVV is never called where AVX512 is false.
func DivVV(dst, a, b *float32, n int) { panic("ops/internal/kernel: no AVX-512 on this architecture") }

// AddVS is never called where AVX512 is false.
func AddVS(dst, a *float32, b float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// SubVS is never called where AVX512 is false.
func SubVS(dst, a *float32, b float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// MulVS is never called where AVX512 is false.
func MulVS(dst, a *float32, b float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// DivVS is never called where AVX512 is false.
func DivVS(dst, a *float32, b float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// SubSV is never called where AVX512 is false.
func SubSV(dst *float32, a float32, b *float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// DivSV is never called where AVX512 is false.
func DivSV(dst *float32, a float32, b *float32, n int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// SumSquaresF64 is never called where AVX512 is false.
func SumSquaresF64(x *float32, n int) float64 {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// DotRows16 is never called where AVX512 is false.
func DotRows16(dst, q, k *float32, ldk, n, d int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// AxpyRows16 is never called where AVX512 is false.
func AxpyRows16(o, p, v *float32, ldv, n, dv int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}

// PrefetchRowsL2 is never called where AVX512 is false.
func PrefetchRowsL2(p *float32, rows, stride, lines int) {
	panic("ops/internal/kernel: no AVX-512 on this architecture")
}
