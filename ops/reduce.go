package ops

import (
	"fmt"
	"math"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// The Reduce family: ReduceSum, ReduceMean, ReduceMax, ReduceMin,
// ReduceProd, ReduceSumSquare, ReduceL1 and ReduceL2. axes come from an attribute until ReduceSum-13 and the
// others' opset 18, from an optional int64 input after. No axes (or an
// empty list) reduces every dim, unless noop_with_empty_axes is set (input
// versions only), which makes the op an identity. keepdims (default 1)
// keeps reduced dims as size 1. Floats accumulate in float64, signed
// integers in int64 and unsigned ones in uint64 (wrapping); ReduceMean of
// integers truncates, and so does ReduceL2's square root.

// reduceKind selects the reduction.
type reduceKind int

const (
	reduceSum reduceKind = iota
	reduceMean
	reduceMax
	reduceMin
	reduceProd
	reduceSumSquare
	reduceL1
	reduceL2
)

func init() {
	// Versions: 11 allows negative axes, 12 (Max, Min) adds int8 and uint8,
	// 13 bfloat16 (and moves ReduceSum's axes to an input), 18 moves the
	// others' axes to an input, and 20 lets ReduceMax and ReduceMin take
	// bool (False < True: any and all).
	for _, op := range []struct {
		name      string
		kind      reduceKind
		axesInput int // first opset taking axes as an input
		versions  []int
		doc       string
	}{
		{"ReduceSum", reduceSum, 13, []int{1, 11, 13}, "sum over axes"},
		{"ReduceMean", reduceMean, 18, []int{1, 11, 13, 18}, "mean over axes"},
		{"ReduceMax", reduceMax, 18, []int{1, 11, 12, 13, 18, 20}, "maximum over axes (NaN propagates; on bool from opset 20: any)"},
		{"ReduceMin", reduceMin, 18, []int{1, 11, 12, 13, 18, 20}, "minimum over axes (NaN propagates; on bool from opset 20: all)"},
		{"ReduceProd", reduceProd, 18, []int{1, 11, 13, 18}, "product over axes"},
		{"ReduceSumSquare", reduceSumSquare, 18, []int{1, 11, 13, 18}, "sum of squares over axes"},
		{"ReduceL1", reduceL1, 18, []int{1, 11, 13, 18}, "sum of absolute values over axes"},
		{"ReduceL2", reduceL2, 18, []int{1, 11, 13, 18}, "square root of the sum of squares over axes (F.normalize's norm)"},
	} {
		for _, r := range versions(op.versions...) {
			maxIn := 1
			if r[0] >= op.axesInput {
				maxIn = 2
			}
			types := NumericTypes
			if r[0] >= 20 {
				types = numericBool
			}
			Register(&Schema{
				Domain: DomainONNX, OpType: op.name, Since: r[0], Until: r[1],
				MinInputs: 1, MaxInputs: maxIn, TypeInput: 0, DTypes: types,
				Infer: reduceInferer(op.kind, op.axesInput, types), Run: reduceRunner(op.kind, op.axesInput, types),
				Doc: op.doc,
			})
		}
	}
}

// reduceAttrs are the attributes and axes of one Reduce node.
type reduceAttrs struct {
	keepdims bool
	noop     bool // noop_with_empty_axes
	// axes as given; known is false when they come from an input whose
	// value is not known (Infer only).
	axes  []int64
	known bool
}

func parseReduce(n *ir.Node, opset, axesInput int, axesVal *Value, axesT *ir.Tensor) (reduceAttrs, error) {
	r := reduceAttrs{known: true}
	kd, err := n.AttrInt("keepdims", 1)
	if err != nil {
		return r, n.Errorf("%w", err)
	}
	r.keepdims = kd != 0
	if opset < axesInput {
		axes, _, err := n.AttrInts("axes")
		if err != nil {
			return r, n.Errorf("%w", err)
		}
		r.axes = axes
		return r, nil
	}
	if n.Attr("axes") != nil {
		return r, n.Errorf("axes is an input from opset %d, not an attribute", axesInput)
	}
	noop, err := n.AttrInt("noop_with_empty_axes", 0)
	if err != nil {
		return r, n.Errorf("%w", err)
	}
	r.noop = noop != 0
	switch {
	case axesT != nil:
		if r.axes, err = reduceAxesOf(axesT); err != nil {
			return r, n.Errorf("%w", err)
		}
	case axesVal != nil && axesVal.Present():
		v := axesVal.Type
		if v.DType != ir.Int64 && v.DType != ir.Int32 {
			return r, n.Errorf("axes must be int64, got %v", v.DType)
		}
		if v.RankKnown && len(v.Shape) > 1 {
			return r, n.Errorf("axes must be 1-D, got shape %s", shapeText(v.Shape))
		}
		if axesVal.Const == nil {
			r.known = false
			break
		}
		if r.axes, err = reduceAxesOf(axesVal.Const); err != nil {
			return r, n.Errorf("%w", err)
		}
	}
	return r, nil
}

// reduceAxesOf reads an axes tensor.
func reduceAxesOf(t *ir.Tensor) ([]int64, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if (t.DType != ir.Int64 && t.DType != ir.Int32) || t.Rank() > 1 {
		return nil, fmt.Errorf("axes must be a 1-D int64 tensor, got %v of shape %v", t.DType, t.Shape)
	}
	return t.AsInt64s()
}

// reducedFlags turns axes into per-dim flags; all is set for "reduce every
// dim" and nil, nil is returned for the no-op case.
func (r reduceAttrs) reducedFlags(rank int) ([]bool, error) {
	flags := make([]bool, rank)
	if len(r.axes) == 0 {
		if r.noop {
			return nil, nil
		}
		for i := range flags {
			flags[i] = true
		}
		return flags, nil
	}
	for _, a := range r.axes {
		ax, err := NormAxis(a, rank)
		if err != nil {
			return nil, err
		}
		if flags[ax] {
			return nil, fmt.Errorf("axis %d appears twice in axes %v", a, r.axes)
		}
		flags[ax] = true
	}
	return flags, nil
}

func reduceInferer(kind reduceKind, axesInput int, types []ir.DType) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if err := checkInferInputs(n, in, 1); err != nil {
			return nil, err
		}
		var axesVal *Value
		if len(in) > 1 {
			axesVal = &in[1]
		}
		attrs, err := parseReduce(n, opset, axesInput, axesVal, nil)
		if err != nil {
			return nil, err
		}
		x := in[0].Type
		if err := checkComputeDType(n, "input", x.DType, types); err != nil {
			return nil, err
		}
		if !x.RankKnown {
			return []Value{UnknownRank(x.DType)}, nil
		}
		rank := len(x.Shape)
		if !attrs.known {
			// Which dims go is unknown; known 1s stay 1s either way.
			if attrs.keepdims {
				out := make(ir.Shape, rank)
				for i, d := range x.Shape {
					if d.Known() && d.Value == 1 {
						out[i] = d
					} else {
						out[i] = ir.UnknownDim
					}
				}
				return []Value{Typed(x.DType, out)}, nil
			}
			if l, ok := reduceVectorLen(*axesVal); ok && l > 0 && l <= rank {
				out := make(ir.Shape, rank-l)
				for i := range out {
					out[i] = ir.UnknownDim
				}
				return []Value{Typed(x.DType, out)}, nil
			}
			return []Value{UnknownRank(x.DType)}, nil
		}
		flags, err := attrs.reducedFlags(rank)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		out := ir.Shape{}
		for i, d := range x.Shape {
			switch {
			case flags == nil || !flags[i]:
				out = append(out, d)
			case attrs.keepdims:
				out = append(out, ir.Dim{Value: 1})
			}
		}
		return []Value{Typed(x.DType, out)}, nil
	}
}

// reduceVectorLen returns the length of a 1-D value whose type says so.
func reduceVectorLen(v Value) (int, bool) {
	if !v.Type.RankKnown || len(v.Type.Shape) != 1 || !v.Type.Shape[0].Known() {
		return 0, false
	}
	return int(v.Type.Shape[0].Value), true
}

func reduceRunner(kind reduceKind, axesInput int, types []ir.DType) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkComputeInputs(n, in, 1); err != nil {
			return nil, err
		}
		opset := ctx.EffectiveOpset()
		var axesT *ir.Tensor
		if len(in) > 1 {
			axesT = in[1]
		}
		attrs, err := parseReduce(n, opset, axesInput, nil, axesT)
		if err != nil {
			return nil, err
		}
		x := in[0]
		if err := checkComputeDType(n, "input", x.DType, types); err != nil {
			return nil, err
		}
		flags, err := attrs.reducedFlags(x.Rank())
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		if flags == nil {
			return []*ir.Tensor{x.Clone()}, nil
		}
		outShape := []int{}
		for i, d := range x.Shape {
			switch {
			case !flags[i]:
				outShape = append(outShape, d)
			case attrs.keepdims:
				outShape = append(outShape, 1)
			}
		}
		p := newReducePlan(x.Shape, flags)
		out, err := newOutput(ctx, x.DType, outShape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		switch x.DType {
		case ir.Float:
			if !reduceRowsF32(computeThreads(ctx), kind, x.Float32s(), p, out.Float32s()) {
				reduceFinish(kind, p, reduceAccumulate[float32, float64](kind, x.Float32s(), p), out.Float32s())
			}
		case ir.Float16:
			f := make([]float32, p.outCount)
			reduceFinish(kind, p, reduceAccumulate[float32, float64](kind, halfToFloat32s(x.Data.([]uint16)), p), f)
			out.Data = float32sToHalf(f)
		case ir.Double:
			reduceFinish(kind, p, reduceAccumulate[float64, float64](kind, x.Data.([]float64), p), out.Data.([]float64))
		case ir.Int8:
			reduceFinish(kind, p, reduceAccumulate[int8, int64](kind, x.Data.([]int8), p), out.Data.([]int8))
		case ir.Int16:
			reduceFinish(kind, p, reduceAccumulate[int16, int64](kind, x.Data.([]int16), p), out.Data.([]int16))
		case ir.Int32:
			reduceFinish(kind, p, reduceAccumulate[int32, int64](kind, x.Data.([]int32), p), out.Data.([]int32))
		case ir.Int64:
			reduceFinish(kind, p, reduceAccumulate[int64, int64](kind, x.Data.([]int64), p), out.Data.([]int64))
		case ir.Uint8:
			reduceFinish(kind, p, reduceAccumulate[uint8, uint64](kind, x.Data.([]uint8), p), out.Data.([]uint8))
		case ir.Uint16:
			reduceFinish(kind, p, reduceAccumulate[uint16, uint64](kind, x.Data.([]uint16), p), out.Data.([]uint16))
		case ir.Uint32:
			reduceFinish(kind, p, reduceAccumulate[uint32, uint64](kind, x.Data.([]uint32), p), out.Data.([]uint32))
		case ir.Uint64:
			reduceFinish(kind, p, reduceAccumulate[uint64, uint64](kind, x.Data.([]uint64), p), out.Data.([]uint64))
		case ir.Bool:
			// Max and Min of bools (False < True) as of 0/1 bytes.
			b := make([]uint8, p.outCount)
			reduceFinish(kind, p, reduceAccumulate[uint8, uint64](kind, boolBytes(x.Bools()), p), b)
			for i, v := range b {
				out.Bools()[i] = v != 0
			}
		}
		return []*ir.Tensor{out}, nil
	}
}

// reduceRowsMin is the input element count from which reduceRowsF32
// splits the rows over the threads.
const reduceRowsMin = 1 << 15

// reduceRowsF32 computes a sum-like float32 reduction (Sum, Mean, SumSquare,
// L1, L2) whose reduced elements are each output's contiguous run, as the
// last-axis norms and means exports compute (F.normalize's ReduceL2, a
// LayerNorm spelled as ReduceMean): row by row, in float64 (rowSum), the
// rows split over the threads. It reports false, computing
// nothing, for any other reduction.
func reduceRowsF32(threads int, kind reduceKind, x []float32, p *reducePlan, out []float32) bool {
	r := len(p.dims)
	if p.empty || r > 2 || !p.red[r-1] || (r == 2 && p.red[0]) {
		return false
	}
	switch kind {
	case reduceSum, reduceMean, reduceSumSquare, reduceL1, reduceL2:
	default:
		return false
	}
	n := p.count
	minRows := max(1, reduceRowsMin/n)
	computeParallel(threads, p.outCount, minRows, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a := rowSum(kind, x[i*n:(i+1)*n])
			switch kind {
			case reduceMean:
				a /= float64(n)
			case reduceL2:
				a = math.Sqrt(a)
			}
			out[i] = float32(a)
		}
	})
	return true
}

// rowSum sums xs (of squares for SumSquare and L2, of absolute values for
// L1) in float64, in four interleaved partial sums (squares with AVX-512:
// in kernel.SumSquaresF64's 32).
func rowSum(kind reduceKind, xs []float32) float64 {
	var a0, a1, a2, a3 float64
	i := 0
	switch kind {
	case reduceSumSquare, reduceL2:
		if kernel.AVX512 && len(xs) > 0 {
			return kernel.SumSquaresF64(&xs[0], len(xs))
		}
		for ; i+4 <= len(xs); i += 4 {
			v0, v1, v2, v3 := float64(xs[i]), float64(xs[i+1]), float64(xs[i+2]), float64(xs[i+3])
			a0, a1, a2, a3 = a0+v0*v0, a1+v1*v1, a2+v2*v2, a3+v3*v3
		}
		for ; i < len(xs); i++ {
			a0 += float64(xs[i]) * float64(xs[i])
		}
	case reduceL1:
		for ; i+4 <= len(xs); i += 4 {
			a0, a1 = a0+math.Abs(float64(xs[i])), a1+math.Abs(float64(xs[i+1]))
			a2, a3 = a2+math.Abs(float64(xs[i+2])), a3+math.Abs(float64(xs[i+3]))
		}
		for ; i < len(xs); i++ {
			a0 += math.Abs(float64(xs[i]))
		}
	default:
		for ; i+4 <= len(xs); i += 4 {
			a0, a1, a2, a3 = a0+float64(xs[i]), a1+float64(xs[i+1]), a2+float64(xs[i+2]), a3+float64(xs[i+3])
		}
		for ; i < len(xs); i++ {
			a0 += float64(xs[i])
		}
	}
	return (a0 + a1) + (a2 + a3)
}

// reducePlan walks an input in runs: dims are the input dims with size-1
// dims dropped and neighbours of the same kind (reduced or kept) merged.
type reducePlan struct {
	dims       []int
	red        []bool
	inStrides  []int
	outStrides []int // 0 for reduced dims
	outCount   int   // output elements
	count      int   // input elements per output element
	empty      bool  // the input has no elements
}

func newReducePlan(shape []int, flags []bool) *reducePlan {
	p := &reducePlan{outCount: 1, count: 1}
	for i, d := range shape {
		if flags[i] {
			p.count *= d
		} else {
			p.outCount *= d
		}
		if d == 0 {
			p.empty = true
		}
		if d == 1 {
			continue
		}
		if k := len(p.dims); k > 0 && p.red[k-1] == flags[i] {
			p.dims[k-1] *= d
			continue
		}
		p.dims = append(p.dims, d)
		p.red = append(p.red, flags[i])
	}
	if len(p.dims) == 0 {
		p.dims, p.red = []int{1}, []bool{false}
	}
	r := len(p.dims)
	p.inStrides, p.outStrides = make([]int, r), make([]int, r)
	in, out := 1, 1
	for i := r - 1; i >= 0; i-- {
		p.inStrides[i] = in
		in *= p.dims[i]
		if !p.red[i] {
			p.outStrides[i] = out
			out *= p.dims[i]
		}
	}
	return p
}

// walk calls f for each innermost run of the input: n elements from inOff,
// all reduced into output element outOff (reduced), or element i going to
// output element outOff+i (not reduced).
func (p *reducePlan) walk(f func(inOff, outOff, n int, reduced bool)) {
	if p.empty {
		return
	}
	r := len(p.dims)
	last, lastRed := p.dims[r-1], p.red[r-1]
	idx := make([]int, r-1)
	inOff, outOff := 0, 0
	for {
		f(inOff, outOff, last, lastRed)
		d := r - 2
		for ; d >= 0; d-- {
			idx[d]++
			inOff += p.inStrides[d]
			outOff += p.outStrides[d]
			if idx[d] < p.dims[d] {
				break
			}
			inOff -= p.inStrides[d] * idx[d]
			outOff -= p.outStrides[d] * idx[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// reduceNum is the Go element types the reductions take.
type reduceNum interface {
	~float32 | ~float64 | ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// reduceAcc is the accumulator types.
type reduceAcc interface{ ~float64 | ~int64 | ~uint64 }

// reduceLimits returns the identity of max and min for A.
func reduceLimits[A reduceAcc]() (lowest, highest A) {
	var z A
	switch any(z).(type) {
	case float64:
		return A(math.Inf(-1)), A(math.Inf(1))
	case int64:
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		return A(lo), A(hi)
	}
	var hi uint64 = math.MaxUint64
	return 0, A(hi)
}

func reduceAccumulate[T reduceNum, A reduceAcc](kind reduceKind, x []T, p *reducePlan) []A {
	acc := make([]A, p.outCount)
	lowest, highest := reduceLimits[A]()
	var init A
	switch kind {
	case reduceProd:
		init = 1
	case reduceMax:
		init = lowest
	case reduceMin:
		init = highest
	}
	if init != 0 {
		for i := range acc {
			acc[i] = init
		}
	}
	p.walk(func(inOff, outOff, n int, reduced bool) {
		xs := x[inOff : inOff+n]
		if reduced {
			a := acc[outOff]
			switch kind {
			case reduceSum, reduceMean:
				for _, v := range xs {
					a += A(v)
				}
			case reduceSumSquare, reduceL2:
				for _, v := range xs {
					a += A(v) * A(v)
				}
			case reduceL1:
				for _, v := range xs {
					a += reduceAbs(A(v))
				}
			case reduceProd:
				for _, v := range xs {
					a *= A(v)
				}
			case reduceMax:
				for _, v := range xs {
					if w := A(v); w > a || w != w {
						a = w
					}
				}
			case reduceMin:
				for _, v := range xs {
					if w := A(v); w < a || w != w {
						a = w
					}
				}
			}
			acc[outOff] = a
			return
		}
		as := acc[outOff : outOff+n]
		switch kind {
		case reduceSum, reduceMean:
			for i, v := range xs {
				as[i] += A(v)
			}
		case reduceSumSquare, reduceL2:
			for i, v := range xs {
				as[i] += A(v) * A(v)
			}
		case reduceL1:
			for i, v := range xs {
				as[i] += reduceAbs(A(v))
			}
		case reduceProd:
			for i, v := range xs {
				as[i] *= A(v)
			}
		case reduceMax:
			for i, v := range xs {
				if w := A(v); w > as[i] || w != w {
					as[i] = w
				}
			}
		case reduceMin:
			for i, v := range xs {
				if w := A(v); w < as[i] || w != w {
					as[i] = w
				}
			}
		}
	})
	return acc
}

// reduceAbs is |a| (an unsigned a as it is).
func reduceAbs[A reduceAcc](a A) A {
	if a < 0 {
		return -a
	}
	return a
}

// reduceFinish converts accumulators to the output type, dividing for
// ReduceMean and taking the square root for ReduceL2.
func reduceFinish[T reduceNum, A reduceAcc](kind reduceKind, p *reducePlan, acc []A, out []T) {
	for i, a := range acc {
		if kind == reduceL2 {
			a = A(math.Sqrt(float64(a)))
		}
		if kind == reduceMean {
			var z A
			_, isFloat := any(z).(float64)
			switch {
			case isFloat:
				a /= A(p.count) // 0/0 is NaN for an empty reduction
			case p.count == 0:
				a = 0
			default:
				a /= A(p.count)
			}
		}
		out[i] = T(a)
	}
}

// boolBytes returns bs as 0/1 bytes.
func boolBytes(bs []bool) []uint8 {
	out := make([]uint8, len(bs))
	for i, b := range bs {
		if b {
			out[i] = 1
		}
	}
	return out
}
