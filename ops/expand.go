package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

func init() {
	// Expand-13 and Tile-13 add bfloat16; Tile-1 (tiles and axis inputs,
	// one axis) is in legacy.go.
	for _, r := range versions(8, 13) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "Expand", Since: r[0], Until: r[1],
			MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: inferExpand, Run: runExpand,
			Doc: "broadcasts a tensor against a shape (numpy rules, both ways)",
		})
	}
	for _, r := range versions(6, 13) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "Tile", Since: r[0], Until: r[1],
			MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: inferTile, Run: runTile,
			Doc: "repeats a tensor along each axis",
		})
	}
}

// shapeInput checks a shape-like input's type at inference time.
func shapeInput(n *ir.Node, v Value, what string) error {
	if v.Type.DType != ir.Int64 {
		return n.Errorf("%s must be int64, got %v", what, v.Type.DType)
	}
	if v.Type.RankKnown && len(v.Type.Shape) != 1 {
		return n.Errorf("%s must be 1-D, got %v", what, v.Type.Shape)
	}
	return nil
}

// checkNonNegative rejects negative literals in a Sym shape vector.
func checkNonNegative(sym ir.Shape, what string) error {
	for _, d := range sym {
		if v, ok := SymInt(d); ok && v < 0 {
			return fmt.Errorf("%s %v has a negative value %d", what, sym, v)
		}
	}
	return nil
}

func inferExpand(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	x, s := in[0], in[1]
	if err := shapeInput(n, s, "shape"); err != nil {
		return nil, err
	}
	target, ok := SymOf(s)
	if !ok {
		l, lok := vectorLen(s)
		if !lok || !x.Type.RankKnown {
			return []Value{UnknownRank(x.Type.DType)}, nil
		}
		target = unknownDims(l)
	}
	if err := checkNonNegative(target, "shape"); err != nil {
		return nil, n.Errorf("%w", err)
	}
	if !x.Type.RankKnown {
		return []Value{UnknownRank(x.Type.DType)}, nil
	}
	out, err := BroadcastDims(x.Type.Shape, target)
	if err != nil {
		return nil, n.Errorf("cannot expand %v to %v: %w", x.Type.Shape, target, err)
	}
	return []Value{Typed(x.Type.DType, out)}, nil
}

// broadcastStrides returns strides that read a tensor of shape in as if it
// had shape out (right-aligned; size-1 and missing axes repeat).
func broadcastStrides(in, out []int) []int {
	src := contiguousStrides(in)
	st := make([]int, len(out))
	off := len(out) - len(in)
	for i := range in {
		if in[i] != 1 || out[off+i] == 1 {
			st[off+i] = src[i]
		}
	}
	return st
}

func runExpand(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 2); err != nil {
		return nil, err
	}
	if in[1].DType != ir.Int64 {
		return nil, n.Errorf("shape must be int64, got %v", in[1].DType)
	}
	target, err := intVector(in[1], "shape")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	x := in[0]
	for _, d := range target {
		if d < 0 || d > MaxOutputElements {
			return nil, n.Errorf("shape %v has an invalid dim %d", target, d)
		}
	}
	out, err := BroadcastShapes(x.Shape, intsOf64(target))
	if err != nil {
		return nil, n.Errorf("cannot expand %v to %v: %w", x.Shape, target, err)
	}
	if _, err := checkedCount(int64sOf(out)); err != nil {
		return nil, n.Errorf("%w", err)
	}
	t, err := stridedView(ctx, x, 0, out, broadcastStrides(x.Shape, out))
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []*ir.Tensor{t}, nil
}

func inferTile(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	x, r := in[0], in[1]
	if err := shapeInput(n, r, "repeats"); err != nil {
		return nil, err
	}
	if !x.Type.RankKnown {
		if l, ok := vectorLen(r); ok {
			return []Value{Typed(x.Type.DType, unknownDims(l))}, nil
		}
		return []Value{UnknownRank(x.Type.DType)}, nil
	}
	rank := len(x.Type.Shape)
	if l, ok := vectorLen(r); ok && l != rank {
		return nil, n.Errorf("repeats has %d elements for input rank %d", l, rank)
	}
	reps, ok := SymOf(r)
	if !ok {
		return []Value{Typed(x.Type.DType, unknownDims(rank))}, nil
	}
	if len(reps) != rank {
		return nil, n.Errorf("repeats %v has %d elements for input rank %d", reps, len(reps), rank)
	}
	if err := checkNonNegative(reps, "repeats"); err != nil {
		return nil, n.Errorf("%w", err)
	}
	out := make(ir.Shape, rank)
	for i, d := range x.Type.Shape {
		rep := reps[i]
		rv, lit := SymInt(rep)
		switch {
		case lit && rv == 1:
			out[i] = d
		case lit && d.Known() && rv <= MaxOutputElements && d.Value <= MaxOutputElements:
			out[i] = ir.Dim{Value: d.Value * rv}
		case lit && rv == 0:
			out[i] = ir.Dim{Value: 0}
		case d.Known() && d.Value == 1:
			out[i] = rep
		case d.Known() && d.Value == 0:
			out[i] = ir.Dim{Value: 0}
		default:
			out[i] = ir.UnknownDim
		}
	}
	return []Value{Typed(x.Type.DType, out)}, nil
}

func runTile(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 2); err != nil {
		return nil, err
	}
	x := in[0]
	if in[1].DType != ir.Int64 {
		return nil, n.Errorf("repeats must be int64, got %v", in[1].DType)
	}
	reps, err := intVector(in[1], "repeats")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if len(reps) != x.Rank() {
		return nil, n.Errorf("repeats %v has %d elements for input rank %d", reps, len(reps), x.Rank())
	}
	out := make([]int64, x.Rank())
	view := make([]int, 0, 2*x.Rank())
	strides := make([]int, 0, 2*x.Rank())
	src := contiguousStrides(x.Shape)
	for i, r := range reps {
		if r < 0 || r > MaxOutputElements || (r > 0 && int64(x.Shape[i]) > MaxOutputElements/r) {
			return nil, n.Errorf("repeats %v: invalid value %d, or the output would exceed %d elements", reps, r, int64(MaxOutputElements))
		}
		out[i] = int64(x.Shape[i]) * r
		view = append(view, int(r), x.Shape[i])
		strides = append(strides, 0, src[i])
	}
	if _, err := checkedCount(out); err != nil {
		return nil, n.Errorf("%w", err)
	}
	t, err := stridedView(ctx, x, 0, view, strides)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	t.Shape = intsOf64(out)
	return []*ir.Tensor{t}, nil
}
