package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

func init() {
	// 11 allows negative axes, 13 moves axes to an input (and adds
	// bfloat16); 21, 23, 24 and 25 add narrow types (anyTypesAt).
	for _, r := range versions(1, 11, 13, 21, 23, 24, 25) {
		neg, attr := r[0] >= 11, r[0] < 13
		types := anyTypesAt(r[0])
		maxIn := 1
		if !attr {
			maxIn = 2
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "Squeeze", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: maxIn, TypeInput: 0, DTypes: types,
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferSqueeze(n, in, neg, attr) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runSqueeze(n, in, neg, attr)
			},
			Doc: "removes size-1 axes (all of them when no axes are given)",
		})
		minIn := 1
		if !attr {
			minIn = 2
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "Unsqueeze", Since: r[0], Until: r[1],
			MinInputs: minIn, MaxInputs: maxIn, TypeInput: 0, DTypes: types,
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferUnsqueeze(n, in, neg, attr) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runUnsqueeze(n, in, neg, attr)
			},
			Doc: "inserts size-1 axes",
		})
	}
}

// inferAxes returns the axes known at inference time. known is false when
// they come from a non-constant input; count is then their number if known
// (-1 otherwise).
func inferAxes(n *ir.Node, in []Value, attr bool) (axes []int64, given, known bool, count int, err error) {
	if attr {
		axes, given, err = n.AttrInts("axes")
		if err != nil {
			return nil, false, false, 0, n.Errorf("%w", err)
		}
		return axes, given, true, len(axes), nil
	}
	v := inVal(in, 1)
	if !v.Present() {
		return nil, false, true, 0, nil
	}
	if err := checkIntInput(v, "axes"); err != nil {
		return nil, false, false, 0, n.Errorf("%w", err)
	}
	axes, ok, err := constInts(v, "axes")
	if err != nil {
		return nil, false, false, 0, n.Errorf("%w", err)
	}
	if ok {
		return axes, true, true, len(axes), nil
	}
	if l, ok := vectorLen(v); ok {
		return nil, true, false, l, nil
	}
	return nil, true, false, -1, nil
}

// squeezeShape computes Squeeze's output dims. dims may be symbolic; a
// symbolic dim named in axes is taken to be 1.
func squeezeShape(dims ir.Shape, axes []int64, given, neg bool) (ir.Shape, error) {
	drop := make(map[int]bool)
	given = given && len(axes) > 0 // an empty axes list squeezes every 1, as no list does
	if given {
		norm, err := normAxes(axes, len(dims), neg)
		if err != nil {
			return nil, err
		}
		for _, a := range norm {
			if d := dims[a]; d.Known() && d.Value != 1 {
				return nil, fmt.Errorf("cannot squeeze axis %d of shape %v: its size is %d, not 1", a, dims, d.Value)
			}
			drop[a] = true
		}
	} else {
		for i, d := range dims {
			if d.Known() && d.Value == 1 {
				drop[i] = true
			}
		}
	}
	out := ir.Shape{}
	for i, d := range dims {
		if !drop[i] {
			out = append(out, d)
		}
	}
	return out, nil
}

func inferSqueeze(n *ir.Node, in []Value, neg, attr bool) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	axes, given, known, count, err := inferAxes(n, in, attr)
	if err != nil {
		return nil, err
	}
	if !x.Type.RankKnown || !known {
		if x.Type.RankKnown && count >= 0 && count <= len(x.Type.Shape) {
			return []Value{Typed(x.Type.DType, unknownDims(len(x.Type.Shape)-count))}, nil
		}
		return []Value{UnknownRank(x.Type.DType)}, nil
	}
	if !given || len(axes) == 0 {
		for _, d := range x.Type.Shape {
			if !d.Known() {
				// a symbolic dim may or may not be 1 at run time
				return []Value{UnknownRank(x.Type.DType)}, nil
			}
		}
	}
	out, err := squeezeShape(x.Type.Shape, axes, given, neg)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if sym, ok := SymOf(x); ok && len(sym) == 1 && len(out) == 0 {
		return []Value{symValue(x.Type.DType, sym, true)}, nil
	}
	return []Value{Typed(x.Type.DType, out)}, nil
}

func runSqueeze(n *ir.Node, in []*ir.Tensor, neg, attr bool) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	axes, given, err := axesFrom(n, in, 1, attr)
	if err != nil {
		return nil, err
	}
	out, err := squeezeShape(ir.ShapeOf(in[0].Shape), axes, given, neg)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	c, _ := out.Concrete()
	return []*ir.Tensor{reshaped(in[0], c)}, nil
}

// unsqueezeShape computes Unsqueeze's output dims.
func unsqueezeShape(dims ir.Shape, axes []int64, neg bool) (ir.Shape, error) {
	r := len(dims) + len(axes)
	norm, err := normAxes(axes, r, neg)
	if err != nil {
		return nil, err
	}
	ones := make(map[int]bool, len(norm))
	for _, a := range norm {
		ones[a] = true
	}
	out := make(ir.Shape, r)
	j := 0
	for i := range out {
		if ones[i] {
			out[i] = ir.Dim{Value: 1}
			continue
		}
		out[i] = dims[j]
		j++
	}
	return out, nil
}

func inferUnsqueeze(n *ir.Node, in []Value, neg, attr bool) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	axes, given, known, count, err := inferAxes(n, in, attr)
	if err != nil {
		return nil, err
	}
	if !given {
		return nil, n.Errorf("axes are required")
	}
	if !x.Type.RankKnown {
		return []Value{UnknownRank(x.Type.DType)}, nil
	}
	if !known {
		if count >= 0 {
			return []Value{Typed(x.Type.DType, unknownDims(len(x.Type.Shape)+count))}, nil
		}
		return []Value{UnknownRank(x.Type.DType)}, nil
	}
	out, err := unsqueezeShape(x.Type.Shape, axes, neg)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if sym, ok := SymOf(x); ok && len(sym) == 1 && len(out) == 1 {
		return []Value{symValue(x.Type.DType, sym, false)}, nil
	}
	return []Value{Typed(x.Type.DType, out)}, nil
}

func runUnsqueeze(n *ir.Node, in []*ir.Tensor, neg, attr bool) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	axes, given, err := axesFrom(n, in, 1, attr)
	if err != nil {
		return nil, err
	}
	if !given {
		return nil, n.Errorf("axes are required")
	}
	out, err := unsqueezeShape(ir.ShapeOf(in[0].Shape), axes, neg)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	c, _ := out.Concrete()
	return []*ir.Tensor{reshaped(in[0], c)}, nil
}
