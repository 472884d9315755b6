package ops

import (
	"fmt"
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// Clip limits every element to [min, max]: elements below min become min,
// then elements above max become max (so min > max gives max everywhere,
// as numpy's clip does); NaN stays NaN. Up to opset 10 the bounds are float
// attributes, defaulting to ∓FLT_MAX (3.402823e+38) as the spec says, and
// the op takes float types. From opset 11 they are optional scalar inputs of
// the input's type (an omitted bound does not limit); opset 12 adds the
// integer types and 13 only bfloat16. Clip-1 states no defaults for its
// bound attributes and carries the legacy consumed_inputs attribute; attnrun
// runs it as Clip-6.

func init() {
	for _, r := range typedVersions(typesFrom(12, FloatTypes, NumericTypes), 1, 6, 11, 12, 13) {
		maxIn := 3
		if r.since < 11 {
			maxIn = 1
		}
		types := r.types
		Register(&Schema{
			Domain: DomainONNX, OpType: "Clip", Since: r.since, Until: r.until,
			MinInputs: 1, MaxInputs: maxIn, TypeInput: 0, DTypes: types,
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferClip(n, opset, in, types) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runClip(ctx, n, in, types)
			},
			RunInto: func(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
				return runClipInto(ctx, n, in, out, types)
			},
			InPlace: []int{0},
			Doc:     "elementwise min(max(x, min), max); bounds are attributes before opset 11, optional scalar inputs after",
		})
	}
}

// clipAttrBounds reads Clip-6's min and max attributes; from opset 11 it
// refuses them.
func clipAttrBounds(n *ir.Node, opset int) (lo, hi float32, err error) {
	if opset >= 11 {
		for _, name := range []string{"min", "max"} {
			if n.Attr(name) != nil {
				return 0, 0, n.Errorf("%s is an input from opset 11, not an attribute", name)
			}
		}
		return 0, 0, nil
	}
	if lo, err = n.AttrFloat("min", -math.MaxFloat32); err != nil {
		return 0, 0, n.Errorf("%w", err)
	}
	if hi, err = n.AttrFloat("max", math.MaxFloat32); err != nil {
		return 0, 0, n.Errorf("%w", err)
	}
	return lo, hi, nil
}

func inferClip(n *ir.Node, opset int, in []Value, allowed []ir.DType) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0].Type
	if err := checkComputeDType(n, "input", x.DType, allowed); err != nil {
		return nil, err
	}
	if _, _, err := clipAttrBounds(n, opset); err != nil {
		return nil, err
	}
	for i, name := range []string{"min", "max"} {
		b := inVal(in, i+1)
		if !b.Present() {
			continue
		}
		if b.Type.DType != x.DType {
			return nil, n.Errorf("%s has element type %v, the input %v", name, b.Type.DType, x.DType)
		}
		if b.Type.RankKnown {
			if c, ok := b.Type.Shape.Concrete(); len(b.Type.Shape) > 1 || (ok && ir.NumElements(c) != 1) {
				return nil, n.Errorf("%s must be a scalar, got shape %s", name, shapeText(b.Type.Shape))
			}
		}
	}
	t := x
	t.Shape = slices.Clone(t.Shape)
	return []Value{{Type: t}}, nil
}

func runClip(ctx *Context, n *ir.Node, in []*ir.Tensor, allowed []ir.DType) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 1); err != nil {
		return nil, err
	}
	out, err := newOutput(ctx, in[0].DType, in[0].Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if err := runClipInto(ctx, n, in, []*ir.Tensor{out}, allowed); err != nil {
		return nil, err
	}
	return []*ir.Tensor{out}, nil
}

// runClipInto is Clip's output-into form; out[0] may be in[0].
func runClipInto(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor, allowed []ir.DType) error {
	if err := checkComputeInputs(n, in, 1); err != nil {
		return err
	}
	opset := ctx.EffectiveOpset()
	x := in[0]
	if err := checkComputeDType(n, "input", x.DType, allowed); err != nil {
		return err
	}
	if err := checkIntoOutput(n, out, x.DType, x.Shape); err != nil {
		return err
	}
	lo, hi, err := clipAttrBounds(n, opset)
	if err != nil {
		return err
	}
	var b clipBounds
	if opset < 11 {
		b = clipBounds{lo: float64(lo), hi: float64(hi), hasLo: true, hasHi: true}
	} else {
		var minT, maxT *ir.Tensor
		if len(in) > 1 {
			minT = in[1]
		}
		if len(in) > 2 {
			maxT = in[2]
		}
		for i, t := range []*ir.Tensor{minT, maxT} {
			if t == nil {
				continue
			}
			name := []string{"min", "max"}[i]
			if t.DType != x.DType {
				return n.Errorf("%s has element type %v, the input %v", name, t.DType, x.DType)
			}
			if t.Rank() > 1 || t.Len() != 1 {
				return n.Errorf("%s must be a scalar, got shape %v", name, t.Shape)
			}
		}
		b = clipBounds{min: minT, max: maxT}
	}
	if err := clipTensor(out[0], x, b); err != nil {
		return n.Errorf("%w", err)
	}
	return nil
}

// clipBounds are Clip's bounds: float attribute values (opsets 6-10, both
// always set) or one-element tensors of the input's type (nil: no bound).
type clipBounds struct {
	lo, hi       float64
	hasLo, hasHi bool
	min, max     *ir.Tensor
}

// clipTensor writes x clipped to b into o.
func clipTensor(o, x *ir.Tensor, b clipBounds) error {
	switch a := x.Data.(type) {
	case []float32:
		clipWith(o.Data.([]float32), a, b)
	case []float64:
		clipWith(o.Data.([]float64), a, b)
	case []int8:
		clipWith(o.Data.([]int8), a, b)
	case []int16:
		clipWith(o.Data.([]int16), a, b)
	case []int32:
		clipWith(o.Data.([]int32), a, b)
	case []int64:
		clipWith(o.Data.([]int64), a, b)
	case []uint8:
		clipWith(o.Data.([]uint8), a, b)
	case []uint32:
		clipWith(o.Data.([]uint32), a, b)
	case []uint64:
		clipWith(o.Data.([]uint64), a, b)
	case []uint16:
		if x.DType != ir.Float16 {
			clipWith(o.Data.([]uint16), a, b)
			return nil
		}
		// Widen the input and the bounds; the result is one of them, so
		// narrowing back is exact.
		hb := b
		for _, p := range []**ir.Tensor{&hb.min, &hb.max} {
			if *p != nil {
				*p = ir.FromSlice(nil, halfToFloat32s((*p).Data.([]uint16))[:1])
			}
		}
		f := halfToFloat32s(a)
		clipWith(f, f, hb)
		float32ToHalf(o.Data.([]uint16), f)
	default:
		return fmt.Errorf("unsupported element type %v", x.DType)
	}
	return nil
}

// clipWith sets o[i] to x[i] clipped to b (o may be x).
func clipWith[T numElem](o, x []T, b clipBounds) {
	var lo, hi T
	hasLo, hasHi := b.hasLo, b.hasHi
	if hasLo {
		lo, hi = T(b.lo), T(b.hi)
	}
	if b.min != nil {
		lo, hasLo = b.min.Data.([]T)[0], true
	}
	if b.max != nil {
		hi, hasHi = b.max.Data.([]T)[0], true
	}
	x = x[:len(o)]
	for i, v := range x {
		if hasLo && v < lo {
			v = lo
		}
		if hasHi && v > hi {
			v = hi
		}
		o[i] = v
	}
}
