package ops

import "github.com/attnrun/attnrun/ir"

func init() {
	// Shape and Size: 13 adds bfloat16; 19, 21, 23, 24 and 25 add the
	// narrow types of their IR versions (anyTypesAt).
	for _, r := range versions(1, 13, 15, 19, 21, 23, 24, 25) {
		withRange := r[0] >= 15
		Register(&Schema{
			Domain: DomainONNX, OpType: "Shape", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferShape(n, in, withRange) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runShape(n, in, withRange)
			},
			Doc: "the shape of a tensor as a 1-D int64 tensor",
		})
	}
	for _, r := range versions(1, 13, 19, 21, 23, 24, 25) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "Size", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: inferSize, Run: runSize,
			Doc: "the number of elements of a tensor as an int64 scalar",
		})
	}
}

// inferSize gives Size's int64 scalar, known (as Sym, and Const when it is a
// number) when the input's shape is.
func inferSize(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0].Type
	if !x.RankKnown {
		return []Value{Typed(ir.Int64, ir.Shape{})}, nil
	}
	return []Value{symValue(ir.Int64, ir.Shape{productOf(x.Shape).dim()}, true)}, nil
}

func runSize(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	return []*ir.Tensor{ir.Scalar(int64(in[0].Len()))}, nil
}

// shapeRange returns the [start, end) slice of a rank-r shape that Shape-15
// returns, clamped as the spec says.
func shapeRange(n *ir.Node, rank int, withRange bool) (int, int, error) {
	if !withRange {
		return 0, rank, nil
	}
	start, err := n.AttrInt("start", 0)
	if err != nil {
		return 0, 0, n.Errorf("%w", err)
	}
	end, err := n.AttrInt("end", int64(rank))
	if err != nil {
		return 0, 0, n.Errorf("%w", err)
	}
	clampAxis := func(a int64) int {
		if a < 0 {
			a += int64(rank)
		}
		return int(min(max(a, 0), int64(rank)))
	}
	s, e := clampAxis(start), clampAxis(end)
	if e < s {
		e = s
	}
	return s, e, nil
}

func inferShape(n *ir.Node, in []Value, withRange bool) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if !x.Type.RankKnown {
		if _, _, err := shapeRange(n, 0, withRange); err != nil {
			return nil, err
		}
		return []Value{Typed(ir.Int64, ir.Shape{ir.UnknownDim})}, nil
	}
	s, e, err := shapeRange(n, len(x.Type.Shape), withRange)
	if err != nil {
		return nil, err
	}
	return []Value{symValue(ir.Int64, x.Type.Shape[s:e], false)}, nil
}

func runShape(n *ir.Node, in []*ir.Tensor, withRange bool) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	s, e, err := shapeRange(n, in[0].Rank(), withRange)
	if err != nil {
		return nil, err
	}
	return []*ir.Tensor{ir.FromSlice([]int{e - s}, int64sOf(in[0].Shape[s:e]))}, nil
}
