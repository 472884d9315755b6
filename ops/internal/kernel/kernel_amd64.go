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
