package ops

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Float32 Sigmoid, the gate of the SwiGLU MLPs of LLaMA-style models
// (x·Sigmoid(x)), and Tanh, in GPT-2's GELU (gelu_new): on AVX-512 vector
// kernels (kernel.Sigmoid16, kernel.Tanh16, within a few ulp of the exact
// value; TestSigmoidKernel, TestTanhKernel measure them), elsewhere
// float64 math per element, the generic unary path.

// vecUnaryChunk is how many elements one task of a parallel vector unary
// kernel takes (a rotary embedding's [512, 16] Sin and Cos make two).
const vecUnaryChunk = 1 << 12

// sigmoidKernel is Sigmoid's float32 kernel where the CPU has AVX-512.
func sigmoidKernel(*ir.Node) func(dst, src []float32, threads int) {
	return vecUnary(kernel.Sigmoid16)
}

// tanhKernel is Tanh's float32 kernel where the CPU has AVX-512.
func tanhKernel(*ir.Node) func(dst, src []float32, threads int) {
	return vecUnary(kernel.Tanh16)
}

// vecUnary runs a 16-lane kernel over a slice (vecUnarySlice), or is nil
// without AVX-512.
func vecUnary(k func(dst, src *float32, n int)) func(dst, src []float32, threads int) {
	if !kernel.AVX512 {
		return nil
	}
	return func(dst, src []float32, threads int) { vecUnarySlice(dst, src, threads, k) }
}

// vecUnarySlice applies the 16-lane kernel k to src into dst on up to
// threads threads.
func vecUnarySlice(dst, src []float32, threads int, k func(dst, src *float32, n int)) {
	src = src[:len(dst)]
	tasks := (len(dst) + vecUnaryChunk - 1) / vecUnaryChunk
	parallelFor(threads, tasks, func(t int) {
		lo, hi := t*vecUnaryChunk, min(len(dst), (t+1)*vecUnaryChunk)
		vecUnarySerial(dst[lo:hi], src[lo:hi], k)
	})
}

// vecUnarySerial is vecUnarySlice on the calling goroutine. The kernels
// take any length: a last partial vector is loaded and stored under a lane
// mask.
func vecUnarySerial(dst, src []float32, k func(dst, src *float32, n int)) {
	if len(dst) > 0 {
		_ = src[len(dst)-1]
		k(&dst[0], &src[0], len(dst))
	}
}
