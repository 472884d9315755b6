package ops

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Float32 Sigmoid, the gate of the SwiGLU MLPs of LLaMA-style models
// (x·Sigmoid(x)): on AVX-512 a vector kernel (kernel.Sigmoid16, within a
// few ulp of the exact value; TestSigmoidKernel measures it), elsewhere
// float64 math.Exp per element, the generic unary path.

// sigmoidChunk is how many elements one task of a parallel Sigmoid takes.
const sigmoidChunk = 1 << 14

// sigmoidKernel is Sigmoid's float32 kernel where the CPU has AVX-512.
func sigmoidKernel(*ir.Node) func(dst, src []float32, threads int) {
	if !kernel.AVX512 {
		return nil
	}
	return sigmoidSlice
}

// sigmoidSlice sets dst[i] = 1/(1 + e^-src[i]) on up to threads threads. A
// partial last vector goes through a padded copy, so that every element
// gets the same arithmetic.
func sigmoidSlice(dst, src []float32, threads int) {
	src = src[:len(dst)]
	tasks := (len(dst) + sigmoidChunk - 1) / sigmoidChunk
	parallelFor(threads, tasks, func(t int) {
		lo, hi := t*sigmoidChunk, min(len(dst), (t+1)*sigmoidChunk)
		whole := lo + (hi-lo)/16*16
		if whole > lo {
			kernel.Sigmoid16(&dst[lo], &src[lo], whole-lo)
		}
		if whole < hi {
			var buf [16]float32
			copy(buf[:], src[whole:hi])
			kernel.Sigmoid16(&buf[0], &buf[0], 16)
			copy(dst[whole:hi], buf[:])
		}
	})
}
