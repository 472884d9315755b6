package ops

import (
	"math"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Float32 Sin and Cos, the rotary position embedding of LLaMA-style models
// (cos and sin of positions × frequencies, computed at run time from
// position_ids): on AVX-512 a vector kernel (kernel.SinCos16, within a few
// ulp for |x| ≤ 1e6; TestSinCosKernel measures it), elements beyond that
// by float64 math.Sin/Cos; elsewhere float64 per element, the generic
// unary path.

// sinCosChunk is how many elements one task of a parallel Sin or Cos takes.
const sinCosChunk = 1 << 12

// sinCosLimit is the |x| past which the kernel's reduction loses digits.
const sinCosLimit = 1e6

// sinKernel is Sin's float32 kernel where the CPU has AVX-512.
func sinKernel(*ir.Node) func(dst, src []float32, threads int) { return sinCosKernel(false) }

// cosKernel is Cos's float32 kernel where the CPU has AVX-512.
func cosKernel(*ir.Node) func(dst, src []float32, threads int) { return sinCosKernel(true) }

func sinCosKernel(cos bool) func(dst, src []float32, threads int) {
	if !kernel.AVX512 {
		return nil
	}
	return func(dst, src []float32, threads int) { sinCosSlice(dst, src, threads, cos) }
}

// sinCosSlice sets dst[i] = sin(src[i]) (cos when cos) on up to threads
// threads. A partial last vector goes through a padded copy, so that every
// element gets the same arithmetic.
func sinCosSlice(dst, src []float32, threads int, cos bool) {
	src = src[:len(dst)]
	f := math.Sin
	if cos {
		f = math.Cos
	}
	tasks := (len(dst) + sinCosChunk - 1) / sinCosChunk
	parallelFor(threads, tasks, func(t int) {
		lo, hi := t*sinCosChunk, min(len(dst), (t+1)*sinCosChunk)
		far := 0
		whole := lo + (hi-lo)/16*16
		if whole > lo {
			far += kernel.SinCos16(&dst[lo], &src[lo], whole-lo, cos)
		}
		if whole < hi {
			var buf [16]float32
			copy(buf[:], src[whole:hi])
			far += kernel.SinCos16(&buf[0], &buf[0], 16, cos)
			copy(dst[whole:hi], buf[:])
		}
		if far == 0 {
			return
		}
		for i := lo; i < hi; i++ {
			if x := float64(src[i]); math.Abs(x) > sinCosLimit {
				dst[i] = float32(f(x))
			}
		}
	})
}
