package ops

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/parallel"
)

// Shared plumbing of the compute-heavy op families (matmul.go, softmax.go,
// layernorm.go, reduce.go, dropout.go).

// computeThreads returns the kernel thread budget of ctx (≥ 1).
func computeThreads(ctx *Context) int {
	if ctx == nil || ctx.Threads < 1 {
		return 1
	}
	return ctx.Threads
}

// SpinTime reports how long the CPU kernels' idle pool workers poll for
// work before parking (set with the ATTNRUN_SPIN environment variable; see
// package ops/internal/parallel).
func SpinTime() time.Duration { return parallel.SpinTime() }

// KernelSet names the CPU kernels the ops run on this machine, fixed when
// the process starts: "avx512" (with "+embedded-broadcast" where the 8×32
// row kernels broadcast A's values in their multiply-adds' memory operands:
// Zen 4, or ATTNRUN_EMBEDDED_BROADCAST=on), "avx2+fma", or "go" (portable
// loops only).
func KernelSet() string {
	return kernelSetName(kernel.AVX512, kernel.Available, kernel.EmbeddedBroadcast)
}

// kernelSetName is KernelSet's name for the CPU's AVX-512, AVX2+FMA and
// broadcast form.
func kernelSetName(avx512, avx2, embedded bool) string {
	switch {
	case avx512 && embedded:
		return "avx512+embedded-broadcast"
	case avx512:
		return "avx512"
	case avx2:
		return "avx2+fma"
	}
	return "go"
}

// SpinEnv names the environment variable that sets SpinTime when a process
// starts (a Go duration such as 500us; 0 parks at once).
const SpinEnv = parallel.SpinEnv

// computeParallel splits [0, count) into at most threads contiguous chunks of
// at least minChunk items and runs f on each, concurrently when there is more
// than one chunk.
func computeParallel(threads, count, minChunk int, f func(lo, hi int)) {
	if count <= 0 {
		return
	}
	chunks := min(threads, max(1, count/max(1, minChunk)))
	if chunks <= 1 {
		f(0, count)
		return
	}
	parallel.Run(chunks, func(c int) {
		f(c*count/chunks, (c+1)*count/chunks)
	})
}

// parallelFor runs f(0..count-1) on up to threads goroutines, each
// taking the next index as it finishes one (tasks of uneven cost).
func parallelFor(threads, count int, f func(i int)) {
	workers := max(1, min(threads, count))
	if workers == 1 {
		for i := 0; i < count; i++ {
			f(i)
		}
		return
	}
	var next atomic.Int64
	parallel.Run(workers, func(int) {
		for i := int(next.Add(1) - 1); i < count; i = int(next.Add(1) - 1) {
			f(i)
		}
	})
}

// checkComputeInputs verifies, for Run, that the inputs up to required are
// present and that every present input is well formed and fits MaxInputs.
func checkComputeInputs(n *ir.Node, in []*ir.Tensor, required int) error {
	if len(in) < required {
		return n.Errorf("needs %d inputs, got %d", required, len(in))
	}
	for i, t := range in {
		if t == nil {
			if i < required {
				return n.Errorf("input %d is missing", i)
			}
			continue
		}
		if err := t.Check(); err != nil {
			return n.Errorf("input %d: %w", i, err)
		}
	}
	return nil
}

// checkComputeDType fails unless dt is one of allowed.
func checkComputeDType(n *ir.Node, what string, dt ir.DType, allowed []ir.DType) error {
	for _, a := range allowed {
		if a == dt {
			return nil
		}
	}
	return n.Errorf("%s has element type %v, which this op does not take (takes %v)", what, dt, allowed)
}

// halfToFloat32s widens float16 bit patterns to float32.
func halfToFloat32s(h []uint16) []float32 {
	out := make([]float32, len(h))
	for i, v := range h {
		out[i] = ir.Float16ToFloat32(v)
	}
	return out
}

// float32sToHalf narrows float32 values to float16 bit patterns.
func float32sToHalf(f []float32) []uint16 {
	out := make([]uint16, len(f))
	float32ToHalf(out, f)
	return out
}

// float32View returns a float32 or float16 tensor's elements as float32
// (float16 is widened into a copy).
func float32View(t *ir.Tensor) ([]float32, error) {
	switch t.DType {
	case ir.Float:
		return t.Float32s(), nil
	case ir.Float16:
		return halfToFloat32s(t.Data.([]uint16)), nil
	}
	return nil, fmt.Errorf("expected float32 or float16, got %v", t.DType)
}

// shapeText prints a shape the way Go prints []int ("[2 3]") when it is
// fully known, and symbolically ("[batch, 3]") otherwise.
func shapeText(s ir.Shape) string {
	if c, ok := s.Concrete(); ok {
		return fmt.Sprint(c)
	}
	return s.String()
}

// checkedElements returns the element count of an output shape, or an error
// when it is invalid or above MaxOutputElements (an output computed from
// inputs with zero-size dims, e.g. MatMul of [n, 0] by [0, n], can be far
// larger than the inputs).
func checkedElements(shape []int) (int, error) {
	n := ir.NumElements(shape)
	if n < 0 || n > MaxOutputElements {
		return 0, fmt.Errorf("output shape %v has too many elements (limit %d)", shape, int64(MaxOutputElements))
	}
	return int(n), nil
}
