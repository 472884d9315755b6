package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

func init() {
	// 11 allows negative indices, 13 adds bfloat16.
	for _, r := range versions(1, 11, 13) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "Gather", Since: r[0], Until: r[1],
			MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: inferGather, Run: runGather,
			Doc: "picks slices along an axis by int32/int64 indices (negative ones count from the end)",
		})
	}
}

// checkIndices validates indices against the gathered dim.
func checkIndices(idx []int64, dim int64) error {
	for _, x := range idx {
		if x < -dim || x >= dim {
			return fmt.Errorf("index %d is out of range for a dimension of size %d", x, dim)
		}
	}
	return nil
}

func inferGather(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	data, ind := in[0], in[1]
	if ind.Type.DType != ir.Int64 && ind.Type.DType != ir.Int32 {
		return nil, n.Errorf("indices must be int32 or int64, got %v", ind.Type.DType)
	}
	axisAttr, err := n.AttrInt("axis", 0)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if !data.Type.RankKnown || !ind.Type.RankKnown {
		return []Value{UnknownRank(data.Type.DType)}, nil
	}
	r := len(data.Type.Shape)
	axis, err := NormAxis(axisAttr, r)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	var idx []int64
	if ind.Const != nil {
		if idx, err = ind.Const.AsInt64s(); err != nil {
			return nil, n.Errorf("indices: %w", err)
		}
		if d := data.Type.Shape[axis]; d.Known() {
			if err := checkIndices(idx, d.Value); err != nil {
				return nil, n.Errorf("%w", err)
			}
		}
	}
	out := copyShape(data.Type.Shape[:axis])
	out = append(out, ind.Type.Shape...)
	out = append(out, data.Type.Shape[axis+1:]...)
	// Shape arithmetic: picking elements of a symbolic shape vector.
	if sym, ok := SymOf(data); ok && r == 1 && idx != nil && len(ind.Type.Shape) <= 1 {
		if err := checkIndices(idx, int64(len(sym))); err != nil {
			return nil, n.Errorf("%w", err)
		}
		picked := make(ir.Shape, len(idx))
		for i, x := range idx {
			if x < 0 {
				x += int64(len(sym))
			}
			picked[i] = sym[x]
		}
		if len(ind.Type.Shape) == 0 && len(picked) == 1 {
			return []Value{symValue(data.Type.DType, picked, true)}, nil
		}
		if len(ind.Type.Shape) == 1 {
			return []Value{symValue(data.Type.DType, picked, false)}, nil
		}
	}
	return []Value{Typed(data.Type.DType, out)}, nil
}

func runGather(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 2); err != nil {
		return nil, err
	}
	data, ind := in[0], in[1]
	if ind.DType != ir.Int64 && ind.DType != ir.Int32 {
		return nil, n.Errorf("indices must be int32 or int64, got %v", ind.DType)
	}
	axisAttr, err := n.AttrInt("axis", 0)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	axis, err := NormAxis(axisAttr, data.Rank())
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	idx, err := ind.AsInt64s()
	if err != nil {
		return nil, n.Errorf("indices: %w", err)
	}
	dim := data.Shape[axis]
	if err := checkIndices(idx, int64(dim)); err != nil {
		return nil, n.Errorf("%w", err)
	}
	shape := append(append(append([]int{}, data.Shape[:axis]...), ind.Shape...), data.Shape[axis+1:]...)
	k, err := kernelsOf(data.Data)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	out := newLike(ctx, data, shape)
	if shapeProd(shape) > 0 {
		k.gather(out.Data, data.Data, shapeProd(data.Shape[:axis]), dim, shapeProd(data.Shape[axis+1:]), idx, computeThreads(ctx))
	}
	return []*ir.Tensor{out}, nil
}
