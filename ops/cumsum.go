package ops

import (
	"fmt"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// CumSum: running sums of x along the axis given by the second input (an
// int32 or int64 scalar, negative counting from the end). exclusive (default
// 0) leaves each element out of its own sum, so the first output is 0;
// reverse (default 0) sums from the end of the axis. Sums accumulate in the
// input's type, element after element as numpy's cumsum does (float16 in
// float32). Opset 14 adds float16 (and bfloat16) to opset 11's types.

// cumSum11Types are the types CumSum takes at opsets 11 to 13.
var cumSum11Types = []ir.DType{ir.Float, ir.Double, ir.Int32, ir.Int64, ir.Uint32, ir.Uint64}

// cumSum14Types adds float16.
var cumSum14Types = []ir.DType{ir.Float, ir.Double, ir.Float16, ir.Int32, ir.Int64, ir.Uint32, ir.Uint64}

func init() {
	for _, r := range typedVersions(typesFrom(14, cumSum11Types, cumSum14Types), 11, 14) {
		types := r.types
		Register(&Schema{
			Domain: DomainONNX, OpType: "CumSum", Since: r.since, Until: r.until,
			MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: types,
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferCumSum(n, in, types) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runCumSum(ctx, n, in, types)
			},
			Doc: "running sum along an axis (input); exclusive and reverse attributes",
		})
	}
}

// cumSumFlags reads the exclusive and reverse attributes.
func cumSumFlags(n *ir.Node) (exclusive, reverse bool, err error) {
	e, err := n.AttrInt("exclusive", 0)
	if err != nil {
		return false, false, n.Errorf("%w", err)
	}
	r, err := n.AttrInt("reverse", 0)
	if err != nil {
		return false, false, n.Errorf("%w", err)
	}
	return e != 0, r != 0, nil
}

// checkCumSumAxisType checks the axis input's type and rank (a scalar; a
// one-element 1-D tensor is taken too).
func checkCumSumAxisType(n *ir.Node, dt ir.DType, shape []int, rankKnown bool) error {
	if dt != ir.Int32 && dt != ir.Int64 {
		return n.Errorf("axis must be int32 or int64, got %v", dt)
	}
	if rankKnown && (len(shape) > 1 || (len(shape) == 1 && shape[0] >= 0 && shape[0] != 1)) {
		return n.Errorf("axis must be a scalar, got shape %v", shape)
	}
	return nil
}

func inferCumSum(n *ir.Node, in []Value, allowed []ir.DType) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	x, ax := in[0].Type, in[1].Type
	if err := checkComputeDType(n, "input", x.DType, allowed); err != nil {
		return nil, err
	}
	if _, _, err := cumSumFlags(n); err != nil {
		return nil, err
	}
	axShape := make([]int, len(ax.Shape)) // -1 for an unknown dim
	for i, d := range ax.Shape {
		axShape[i] = -1
		if d.Known() {
			axShape[i] = int(d.Value)
		}
	}
	if err := checkCumSumAxisType(n, ax.DType, axShape, ax.RankKnown); err != nil {
		return nil, err
	}
	if c := in[1].Const; c != nil && x.RankKnown {
		if _, err := cumSumAxis(c, len(x.Shape)); err != nil {
			return nil, n.Errorf("%w", err)
		}
	}
	t := x
	t.Shape = slices.Clone(t.Shape)
	return []Value{{Type: t}}, nil
}

// cumSumAxis reads and normalizes the axis tensor.
func cumSumAxis(t *ir.Tensor, rank int) (int, error) {
	if t.Len() != 1 {
		return 0, fmt.Errorf("axis must be a scalar, got shape %v", t.Shape)
	}
	v, err := t.AsInt64s()
	if err != nil {
		return 0, err
	}
	return NormAxis(v[0], rank)
}

func runCumSum(ctx *Context, n *ir.Node, in []*ir.Tensor, allowed []ir.DType) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 2); err != nil {
		return nil, err
	}
	x, ax := in[0], in[1]
	if err := checkComputeDType(n, "input", x.DType, allowed); err != nil {
		return nil, err
	}
	if err := checkCumSumAxisType(n, ax.DType, ax.Shape, true); err != nil {
		return nil, err
	}
	exclusive, reverse, err := cumSumFlags(n)
	if err != nil {
		return nil, err
	}
	axis, err := cumSumAxis(ax, x.Rank())
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	out, err := newOutput(ctx, x.DType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	outer, size, inner := int(ir.NumElements(x.Shape[:axis])), x.Shape[axis], int(ir.NumElements(x.Shape[axis+1:]))
	switch a := x.Data.(type) {
	case []float32:
		cumSum(out.Data.([]float32), a, outer, size, inner, exclusive, reverse)
	case []float64:
		cumSum(out.Data.([]float64), a, outer, size, inner, exclusive, reverse)
	case []int32:
		cumSum(out.Data.([]int32), a, outer, size, inner, exclusive, reverse)
	case []int64:
		cumSum(out.Data.([]int64), a, outer, size, inner, exclusive, reverse)
	case []uint32:
		cumSum(out.Data.([]uint32), a, outer, size, inner, exclusive, reverse)
	case []uint64:
		cumSum(out.Data.([]uint64), a, outer, size, inner, exclusive, reverse)
	case []uint16: // float16 (the only 16-bit type CumSum takes)
		f := halfToFloat32s(a)
		cumSum(f, f, outer, size, inner, exclusive, reverse)
		float32ToHalf(out.Data.([]uint16), f)
	default:
		return nil, n.Errorf("unsupported element type %v", x.DType)
	}
	return []*ir.Tensor{out}, nil
}

// cumSum writes the running sums of x, laid out outer×size×inner, along
// size into o (which may be x).
func cumSum[T numElem](o, x []T, outer, size, inner int, exclusive, reverse bool) {
	acc := make([]T, inner)
	for p := 0; p < outer; p++ {
		clear(acc)
		base := p * size * inner
		for s := 0; s < size; s++ {
			k := s
			if reverse {
				k = size - 1 - s
			}
			row := base + k*inner
			xs, os := x[row:row+inner], o[row:row+inner]
			for j, v := range xs {
				if exclusive {
					os[j] = acc[j]
					acc[j] += v
				} else {
					acc[j] += v
					os[j] = acc[j]
				}
			}
		}
	}
}
