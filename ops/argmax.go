package ops

import (
	"github.com/attnrun/attnrun/ir"
)

// ArgMax and ArgMin: the int64 index of the largest (smallest) element
// along axis (default 0), keeping the axis as size 1 when keepdims (default
// 1) is set. Ties go to the first index, or from opset 12 to the last one
// when select_last_index is 1. NaN counts as the extreme value, as numpy's
// argmax and argmin (the ONNX reference) treat it: the first NaN wins, the
// last with select_last_index. A negative axis needs opset 11; opset 13
// only adds bfloat16.

func init() {
	for _, op := range []struct {
		name     string
		smallest bool
		doc      string
	}{
		{"ArgMax", false, "int64 index of the largest element along axis (first or, with select_last_index, last of ties)"},
		{"ArgMin", true, "int64 index of the smallest element along axis (first or, with select_last_index, last of ties)"},
	} {
		for _, r := range versions(1, 11, 12, 13) {
			Register(&Schema{
				Domain: DomainONNX, OpType: op.name, Since: r[0], Until: r[1],
				MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: NumericTypes,
				Infer: inferArg, Run: argRunner(op.smallest),
				Doc: op.doc,
			})
		}
	}
}

// argAttrs are one ArgMax/ArgMin node's attributes, the axis normalized.
type argAttrs struct {
	axis     int
	keepdims bool
	last     bool // select_last_index
}

func parseArg(n *ir.Node, opset, rank int) (argAttrs, error) {
	var a argAttrs
	axis, err := n.AttrInt("axis", 0)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if axis < 0 && opset < 11 {
		return a, n.Errorf("negative axis %d needs opset 11 or later", axis)
	}
	kd, err := n.AttrInt("keepdims", 1)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	a.keepdims = kd != 0
	if opset < 12 && n.Attr("select_last_index") != nil {
		return a, n.Errorf("attribute select_last_index needs opset 12 or later")
	}
	last, err := n.AttrInt("select_last_index", 0)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	a.last = last != 0
	if rank < 0 { // unknown rank: only the attributes are checked
		return a, nil
	}
	if a.axis, err = NormAxis(axis, rank); err != nil {
		return a, n.Errorf("%w", err)
	}
	return a, nil
}

func inferArg(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0].Type
	if err := checkComputeDType(n, "input", x.DType, NumericTypes); err != nil {
		return nil, err
	}
	rank := -1
	if x.RankKnown {
		rank = len(x.Shape)
	}
	a, err := parseArg(n, opset, rank)
	if err != nil {
		return nil, err
	}
	if !x.RankKnown {
		return []Value{UnknownRank(ir.Int64)}, nil
	}
	out := ir.Shape{}
	for i, d := range x.Shape {
		switch {
		case i != a.axis:
			out = append(out, d)
		case a.keepdims:
			out = append(out, ir.Dim{Value: 1})
		}
	}
	return []Value{Typed(ir.Int64, out)}, nil
}

func argRunner(smallest bool) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkComputeInputs(n, in, 1); err != nil {
			return nil, err
		}
		opset := ctx.EffectiveOpset()
		x := in[0]
		if err := checkComputeDType(n, "input", x.DType, NumericTypes); err != nil {
			return nil, err
		}
		a, err := parseArg(n, opset, x.Rank())
		if err != nil {
			return nil, err
		}
		var shape []int
		for i, d := range x.Shape {
			switch {
			case i != a.axis:
				shape = append(shape, d)
			case a.keepdims:
				shape = append(shape, 1)
			}
		}
		out, err := newOutput(ctx, ir.Int64, shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		size := x.Shape[a.axis]
		if size == 0 && out.Len() > 0 {
			return nil, n.Errorf("cannot take the index of an extreme element along axis %d of size 0 (input shape %v)", a.axis, x.Shape)
		}
		outer, inner := int(ir.NumElements(x.Shape[:a.axis])), int(ir.NumElements(x.Shape[a.axis+1:]))
		o := out.Int64s()
		switch d := x.Data.(type) {
		case []float32:
			argIndex(o, d, outer, size, inner, smallest, a.last)
		case []float64:
			argIndex(o, d, outer, size, inner, smallest, a.last)
		case []int8:
			argIndex(o, d, outer, size, inner, smallest, a.last)
		case []int16:
			argIndex(o, d, outer, size, inner, smallest, a.last)
		case []int32:
			argIndex(o, d, outer, size, inner, smallest, a.last)
		case []int64:
			argIndex(o, d, outer, size, inner, smallest, a.last)
		case []uint8:
			argIndex(o, d, outer, size, inner, smallest, a.last)
		case []uint16:
			if x.DType == ir.Float16 {
				argIndex(o, halfToFloat32s(d), outer, size, inner, smallest, a.last)
			} else {
				argIndex(o, d, outer, size, inner, smallest, a.last)
			}
		case []uint32:
			argIndex(o, d, outer, size, inner, smallest, a.last)
		case []uint64:
			argIndex(o, d, outer, size, inner, smallest, a.last)
		default:
			return nil, n.Errorf("unsupported element type %v", x.DType)
		}
		return []*ir.Tensor{out}, nil
	}
}

// argIndex writes to o, for each (outer, inner) position of x laid out
// outer×size×inner, the index along size of its extreme element.
func argIndex[T numElem](o []int64, x []T, outer, size, inner int, smallest, last bool) {
	if size == 0 {
		return
	}
	for p := 0; p < outer; p++ {
		block := x[p*size*inner : (p+1)*size*inner]
		for j := 0; j < inner; j++ {
			best, bi := block[j], 0
			for k := 1; k < size; k++ {
				v := block[k*inner+j]
				if argBetter(v, best, smallest, last) {
					best, bi = v, k
				}
			}
			o[p*inner+j] = int64(bi)
		}
	}
}

// argBetter reports whether v replaces best as the extreme so far: it is
// strictly more extreme (or, with last, at least as extreme), or it is NaN
// and best is not (with last, any NaN replaces).
func argBetter[T numElem](v, best T, smallest, last bool) bool {
	if v != v { // NaN
		return last || best == best
	}
	if smallest {
		return v < best || (last && v == best)
	}
	return v > best || (last && v == best)
}
