package ops

import (
	"fmt"
	"maps"

	"github.com/attnrun/attnrun/ir"
)

// Reshape-1 takes the target shape as attribute `shape` (float types only);
// from 5 on it is the second input. 14 adds `allowzero` (a 0 is a zero-size
// dim rather than a copy of the input's). 13 adds bfloat16; 19, 21, 23, 24
// and 25 add narrow types (anyTypesAt). Flatten: 9 takes every type, 11
// negative axes, 13 bfloat16, 21 to 25 narrow types.
func init() {
	Register(&Schema{
		Domain: DomainONNX, OpType: "Reshape", Since: 1, Until: 4,
		MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: FloatTypes,
		Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) {
			shape, err := reshapeAttrShape(n)
			if err != nil {
				return nil, err
			}
			return inferReshape(n, append(in[:1:1], constValue(shape)), false)
		},
		Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
			shape, err := reshapeAttrShape(n)
			if err != nil {
				return nil, err
			}
			return runReshape(n, append(in[:1:1], shape), false)
		},
		Doc: "gives a tensor the shape of attribute `shape` (0 copies a dim, -1 is inferred)",
	})
	for _, r := range versions(5, 13, 14, 19, 21, 23, 24, 25) {
		allowZeroAttr := r[0] >= 14
		doc := "gives a tensor a new shape of the same size (0 copies a dim, -1 is inferred)"
		if allowZeroAttr {
			doc = "gives a tensor a new shape of the same size (0 copies a dim unless allowzero, -1 is inferred)"
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "Reshape", Since: r[0], Until: r[1],
			MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferReshape(n, in, allowZeroAttr) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runReshape(n, in, allowZeroAttr)
			},
			Doc: doc,
		})
	}
	for _, r := range versions(1, 9, 11, 13, 21, 23, 24, 25) {
		neg := r[0] >= 11
		types := anyTypesAt(r[0])
		if r[0] < 9 {
			types = FloatTypes
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "Flatten", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: types,
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferFlatten(n, in, neg) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runFlatten(n, in, neg)
			},
			Doc: "reshapes to 2-D, splitting the dims at axis",
		})
	}
}

// reshapeAttrShape reads Reshape-1's `shape` attribute as an int64 vector.
func reshapeAttrShape(n *ir.Node) (*ir.Tensor, error) {
	shape, ok, err := n.AttrInts("shape")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if !ok {
		return nil, n.Errorf("missing required attribute \"shape\"")
	}
	return ir.FromSlice([]int{len(shape)}, shape), nil
}

// constValue is the Value of a constant tensor.
func constValue(t *ir.Tensor) Value { return Value{Type: Known(t.DType, t.Shape), Const: t} }

func reshapeAllowZero(n *ir.Node, attr bool) (bool, error) {
	if !attr {
		return false, nil
	}
	a, err := n.AttrInt("allowzero", 0)
	if err != nil {
		return false, n.Errorf("%w", err)
	}
	return a != 0, nil
}

// reshapeDims resolves Reshape's target (a Sym vector: literals, symbols or
// unknowns) against the input dims.
func reshapeDims(in, target ir.Shape, allowZero bool) (ir.Shape, error) {
	out := make(ir.Shape, len(target))
	infer := -1
	hasZero := false
	for i, d := range target {
		v, lit := SymInt(d)
		switch {
		case !lit:
			out[i] = d
		case v == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("shape %v has more than one -1", target)
			}
			infer = i
		case v < -1:
			return nil, fmt.Errorf("shape %v has invalid dim %d", target, v)
		case v == 0 && !allowZero:
			if i >= len(in) {
				return nil, fmt.Errorf("shape %v copies dim %d with 0, but the input %v has rank %d", target, i, in, len(in))
			}
			out[i] = in[i]
		default:
			hasZero = hasZero || v == 0
			out[i] = ir.Dim{Value: v}
		}
	}
	if allowZero && hasZero && infer >= 0 {
		return nil, fmt.Errorf("shape %v has both 0 and -1 while allowzero is set", target)
	}
	pin := productOf(in)
	rest := make(ir.Shape, 0, len(out))
	for i, d := range out {
		if i != infer {
			rest = append(rest, d)
		}
	}
	prest := productOf(rest)
	if infer >= 0 {
		out[infer] = pin.div(prest)
		if !pin.unknown && !prest.unknown && len(pin.syms) == 0 && len(prest.syms) == 0 {
			if prest.c == 0 || pin.c%prest.c != 0 {
				return nil, fmt.Errorf("cannot reshape %v to %v: %d elements do not divide into dims of product %d", in, target, pin.c, prest.c)
			}
		}
		return out, nil
	}
	if !pin.unknown && !prest.unknown && maps.Equal(pin.syms, prest.syms) && pin.c != prest.c {
		return nil, fmt.Errorf("cannot reshape %v to %v: element counts differ", in, out)
	}
	return out, nil
}

func inferReshape(n *ir.Node, in []Value, allowZeroAttr bool) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	x, s := in[0], in[1]
	if s.Type.DType != ir.Int64 {
		return nil, n.Errorf("shape must be int64, got %v", s.Type.DType)
	}
	if s.Type.RankKnown && len(s.Type.Shape) != 1 {
		return nil, n.Errorf("shape must be 1-D, got %v", s.Type.Shape)
	}
	allowZero, err := reshapeAllowZero(n, allowZeroAttr)
	if err != nil {
		return nil, err
	}
	target, ok := SymOf(s)
	if !ok {
		if l, ok := vectorLen(s); ok {
			return []Value{Typed(x.Type.DType, unknownDims(l))}, nil
		}
		return []Value{UnknownRank(x.Type.DType)}, nil
	}
	dims := x.Type.Shape
	if !x.Type.RankKnown {
		// without the input rank, copied (0) and inferred (-1) dims are unknown
		dims = unknownDims(len(target))
	}
	out, err := reshapeDims(dims, target, allowZero)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	// A shape vector known symbolically, reshaped to a vector or scalar
	// (PyTorch's expand reshapes its sizes to [-1]), stays known.
	if sym, ok := SymOf(x); ok && x.Const == nil && symVector(x) && len(out) <= 1 {
		if c, known := out.Concrete(); known && ir.NumElements(c) == int64(len(sym)) {
			return []Value{symValue(x.Type.DType, sym, len(out) == 0)}, nil
		}
	}
	return []Value{Typed(x.Type.DType, out)}, nil
}

func runReshape(n *ir.Node, in []*ir.Tensor, allowZeroAttr bool) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 2); err != nil {
		return nil, err
	}
	if in[1].DType != ir.Int64 {
		return nil, n.Errorf("shape must be int64, got %v", in[1].DType)
	}
	vals, err := intVector(in[1], "shape")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	allowZero, err := reshapeAllowZero(n, allowZeroAttr)
	if err != nil {
		return nil, err
	}
	target := make(ir.Shape, len(vals))
	for i, v := range vals {
		target[i] = SymLiteral(v)
	}
	out, err := reshapeDims(ir.ShapeOf(in[0].Shape), target, allowZero)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	c, ok := out.Concrete()
	if !ok || ir.NumElements(c) != int64(in[0].Len()) {
		return nil, n.Errorf("cannot reshape %v to %v", in[0].Shape, vals)
	}
	return []*ir.Tensor{reshaped(in[0], c)}, nil
}

// flattenAxis reads Flatten's axis, which may equal the rank.
func flattenAxis(n *ir.Node, rank int, neg bool) (int, error) {
	a, err := n.AttrInt("axis", 1)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	if a < 0 && !neg {
		return 0, n.Errorf("negative axis %d needs opset 11 or later", a)
	}
	if a < -int64(rank) || a > int64(rank) {
		return 0, n.Errorf("axis %d is out of range for rank %d", a, rank)
	}
	if a < 0 {
		a += int64(rank)
	}
	return int(a), nil
}

func inferFlatten(n *ir.Node, in []Value, neg bool) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if !x.Type.RankKnown {
		return []Value{Typed(x.Type.DType, unknownDims(2))}, nil
	}
	axis, err := flattenAxis(n, len(x.Type.Shape), neg)
	if err != nil {
		return nil, err
	}
	s := x.Type.Shape
	return []Value{Typed(x.Type.DType, ir.Shape{productOf(s[:axis]).dim(), productOf(s[axis:]).dim()})}, nil
}

func runFlatten(n *ir.Node, in []*ir.Tensor, neg bool) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	axis, err := flattenAxis(n, x.Rank(), neg)
	if err != nil {
		return nil, err
	}
	return []*ir.Tensor{reshaped(x, []int{shapeProd(x.Shape[:axis]), shapeProd(x.Shape[axis:])})}, nil
}
