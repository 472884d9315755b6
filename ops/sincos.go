package ops

import (
	"math"
	"sync/atomic"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Float32 Sin and Cos, the rotary position embedding of LLaMA-style models
// (cos and sin of positions × frequencies, computed at run time from
// position_ids): on AVX-512 a vector kernel (kernel.SinCos16, within a few
// ulp for |x| ≤ 1e6; TestSinCosKernel measures it), elements beyond that
// by float64 math.Sin/Cos; elsewhere float64 per element, the generic
// unary path.

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
// threads (vecUnarySlice), then computes again in float64 the elements
// past sinCosLimit, if the kernel met any.
func sinCosSlice(dst, src []float32, threads int, cos bool) {
	var far atomic.Int64
	vecUnarySlice(dst, src, threads, func(d, s *float32, n int) {
		if k := kernel.SinCos16(d, s, n, cos); k > 0 {
			far.Add(int64(k))
		}
	})
	if far.Load() == 0 {
		return
	}
	f := math.Sin
	if cos {
		f = math.Cos
	}
	for i, x := range src[:len(dst)] {
		if math.Abs(float64(x)) > sinCosLimit {
			dst[i] = float32(f(float64(x)))
		}
	}
}
