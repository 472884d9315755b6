package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

// GatherElements picks one element of data per element of indices (int32 or
// int64, negative counting from the end) along axis (default 0): with axis
// 1, out[i][j][k] = data[i][indices[i][j][k]][k]. indices has data's rank and
// no larger dims except along axis; the output has indices' shape.
// ScatterElements (scatter.go) is its inverse. Version 13 only adds
// bfloat16.

func init() {
	for _, r := range versions(11, 13) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "GatherElements", Since: r[0], Until: r[1],
			MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: inferGatherElements, Run: runGatherElements,
			Doc: "picks data elements along an axis at the positions indices gives (output has indices' shape)",
		})
	}
}

// elementsAxis reads the axis of GatherElements and ScatterElements.
func elementsAxis(n *ir.Node, rank int) (int, error) {
	a, err := n.AttrInt("axis", 0)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	ax, err := NormAxis(a, rank)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	return ax, nil
}

// checkIndexType fails unless v's type is int32 or int64.
func checkIndexType(n *ir.Node, what string, dt ir.DType) error {
	if dt != ir.Int32 && dt != ir.Int64 {
		return n.Errorf("%s must be int32 or int64, got %v", what, dt)
	}
	return nil
}

func inferGatherElements(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	data, ind := in[0].Type, in[1].Type
	if err := checkIndexType(n, "indices", ind.DType); err != nil {
		return nil, err
	}
	if data.RankKnown && ind.RankKnown {
		if len(data.Shape) != len(ind.Shape) {
			return nil, n.Errorf("indices has rank %d, data rank %d: they must be equal", len(ind.Shape), len(data.Shape))
		}
		if _, err := elementsAxis(n, len(data.Shape)); err != nil {
			return nil, err
		}
	}
	if !ind.RankKnown {
		return []Value{UnknownRank(data.DType)}, nil
	}
	return []Value{Typed(data.DType, copyShape(ind.Shape))}, nil
}

// elementOffsets returns, for each element of indices (row-major), the
// offset in data of the element it addresses along axis: the element's own
// coordinates with the axis one replaced by the index. It checks ranks,
// dims and index ranges.
func elementOffsets(data []int, ind *ir.Tensor, axis int) ([]int, error) {
	if len(ind.Shape) != len(data) {
		return nil, fmt.Errorf("indices has rank %d, data rank %d: they must be equal", len(ind.Shape), len(data))
	}
	for i, d := range ind.Shape {
		if i != axis && d > data[i] {
			return nil, fmt.Errorf("indices has shape %v, larger than data %v outside axis %d", ind.Shape, data, axis)
		}
	}
	idx, err := ind.AsInt64s()
	if err != nil {
		return nil, err
	}
	strides := contiguousStrides(data)
	dim := int64(data[axis])
	out := make([]int, len(idx))
	coord := make([]int, len(ind.Shape))
	for i, x := range idx {
		if x < -dim || x >= dim {
			return nil, fmt.Errorf("index %d is out of range for axis %d of size %d", x, axis, dim)
		}
		if x < 0 {
			x += dim
		}
		off := 0
		for d, c := range coord {
			if d == axis {
				c = int(x)
			}
			off += c * strides[d]
		}
		out[i] = off
		for d := len(coord) - 1; d >= 0; d-- { // next coordinate, row-major
			coord[d]++
			if coord[d] < ind.Shape[d] {
				break
			}
			coord[d] = 0
		}
	}
	return out, nil
}

// nodeElementOffsets is elementOffsets along the node's axis.
func nodeElementOffsets(n *ir.Node, data, ind *ir.Tensor) ([]int, error) {
	axis, err := elementsAxis(n, data.Rank())
	if err != nil {
		return nil, err
	}
	offs, err := elementOffsets(data.Shape, ind, axis)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return offs, nil
}

func runGatherElements(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 2); err != nil {
		return nil, err
	}
	data, ind := in[0], in[1]
	if err := checkIndexType(n, "indices", ind.DType); err != nil {
		return nil, err
	}
	offs, err := nodeElementOffsets(n, data, ind)
	if err != nil {
		return nil, err
	}
	k, err := kernelsOf(data.Data)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	out := newLike(ctx, data, ind.Shape)
	k.take(out.Data, data.Data, offs)
	return []*ir.Tensor{out}, nil
}
