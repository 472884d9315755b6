package ops

import (
	"fmt"
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// Constant: 9 allows every type, 11 sparse_value, 12 the value_* attributes,
// 13 bfloat16, 19 to 25 the narrow types (anyTypesAt), whose values a
// version that does not allow them refuses. ConstantOfShape: 20 adds
// bfloat16 and float8, 21 to 25 the other narrow types. Identity: 14 and 16
// add sequence and optional values, which attnrun does not hold; 19 to 25
// narrow types. Range: 27 adds float16 and bfloat16, computed in the type
// of attribute stash_type.
func init() {
	for _, r := range versions(1, 9, 11, 12, 13, 19, 21, 23, 24, 25) {
		valueAttrs := r[0] >= 12
		since := r[0]
		Register(&Schema{
			Domain: DomainONNX, OpType: "Constant", Since: r[0], Until: r[1],
			MinInputs: 0, MaxInputs: 0, TypeInput: -1,
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) {
				t, err := constantValue(n, valueAttrs, since)
				if err != nil {
					return nil, err
				}
				return []Value{{Type: Known(t.DType, t.Shape), Const: t}}, nil
			},
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				t, err := constantValue(n, valueAttrs, since)
				if err != nil {
					return nil, err
				}
				return []*ir.Tensor{t.Clone()}, nil
			},
			Doc: "a constant tensor given by an attribute",
		})
	}
	for _, r := range versions(9, 20, 21, 23, 24, 25) {
		since := r[0]
		Register(&Schema{
			Domain: DomainONNX, OpType: "ConstantOfShape", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: 1, TypeInput: -1,
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferConstantOfShape(n, in, since) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runConstantOfShape(ctx, n, in, since)
			},
			Doc: "a tensor of the given shape filled with one value (default float32 0)",
		})
	}
	for _, r := range versions(1, 13, 14, 16, 19, 21, 23, 24, 25) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "Identity", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) {
				if err := checkInferInputs(n, in, 1); err != nil {
					return nil, err
				}
				return []Value{in[0]}, nil
			},
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				if err := checkRunInputs(n, in, 1); err != nil {
					return nil, err
				}
				return []*ir.Tensor{in[0].Clone()}, nil
			},
			Doc: "copies its input",
		})
	}
	Register(&Schema{
		Domain: DomainONNX, OpType: "Range", Since: 11, Until: 26,
		MinInputs: 3, MaxInputs: 3, TypeInput: 0, DTypes: range11Types,
		Infer: inferRange, Run: runRange,
		Doc: "the sequence start, start+delta, … up to (not including) limit",
	})
	Register(&Schema{
		Domain: DomainONNX, OpType: "Range", Since: 27, Until: MaxOpset,
		MinInputs: 3, MaxInputs: 3, TypeInput: 0, DTypes: range27Types,
		Infer: inferRange, Run: runRange,
		Doc: "the sequence start, start+delta, … up to (not including) limit; float16 and bfloat16 computed in stash_type",
	})
}

// Range's types: opset 27 adds float16 and bfloat16.
var (
	range11Types = []ir.DType{ir.Float, ir.Double, ir.Int16, ir.Int32, ir.Int64}
	range27Types = append(append([]ir.DType{}, range11Types...), ir.Float16, ir.BFloat16)
)

// checkNarrowValue refuses a tensor of a narrow type that the op version
// starting at opset since does not allow.
func checkNarrowValue(n *ir.Node, what string, dt ir.DType, since int) error {
	if dt.Narrow() && !slices.Contains(narrowTypesAt(since), dt) {
		return n.Errorf("%s has element type %v, which %s-%d does not allow (a later opset does)", what, dt, n.OpType, since)
	}
	return nil
}

// constantValue reads Constant's one value attribute; since is the first
// opset of the op version.
func constantValue(n *ir.Node, valueAttrs bool, since int) (*ir.Tensor, error) {
	var found []*ir.Attribute
	for _, a := range n.Attrs {
		switch a.Name {
		case "value", "sparse_value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings":
			found = append(found, a)
		}
	}
	if len(found) != 1 {
		return nil, n.Errorf("needs exactly one value attribute, got %d", len(found))
	}
	a := found[0]
	if a.Name != "value" && a.Name != "sparse_value" && !valueAttrs {
		return nil, n.Errorf("attribute %s needs opset 12 or later", a.Name)
	}
	want := map[string]ir.AttrType{
		"value": ir.AttrTensor, "sparse_value": ir.AttrSparse,
		"value_float": ir.AttrFloat, "value_floats": ir.AttrFloats,
		"value_int": ir.AttrInt, "value_ints": ir.AttrInts,
		"value_string": ir.AttrString, "value_strings": ir.AttrStrings,
	}[a.Name]
	if a.Type != want {
		return nil, n.Errorf("attribute %s is %v, want %v", a.Name, a.Type, want)
	}
	switch a.Name {
	case "value":
		t := a.Tensor
		if t == nil {
			return nil, n.Errorf("attribute value holds no tensor")
		}
		if !t.DType.Known() {
			return nil, n.Errorf("value has unsupported dtype %v", t.DType)
		}
		if err := checkNarrowValue(n, "value", t.DType, since); err != nil {
			return nil, err
		}
		if err := t.Check(); err != nil {
			return nil, n.Errorf("value: %w", err)
		}
		return t, nil
	case "sparse_value":
		return nil, n.Errorf("sparse_value constants are not supported")
	case "value_float":
		return ir.Scalar(a.Float), nil
	case "value_floats":
		return ir.FromSlice([]int{len(a.Floats)}, append([]float32{}, a.Floats...)), nil
	case "value_int":
		return ir.Scalar(a.Int), nil
	case "value_ints":
		return ir.FromSlice([]int{len(a.Ints)}, append([]int64{}, a.Ints...)), nil
	case "value_string":
		return ir.FromSlice(nil, []string{string(a.String)}), nil
	}
	s := make([]string, len(a.Strings))
	for i, b := range a.Strings {
		s[i] = string(b)
	}
	return ir.FromSlice([]int{len(s)}, s), nil
}

// fillValue reads ConstantOfShape's value attribute (default float32 0);
// since is the first opset of the op version.
func fillValue(n *ir.Node, since int) (*ir.Tensor, error) {
	a := n.Attr("value")
	if a == nil {
		return ir.FromSlice([]int{1}, []float32{0}), nil
	}
	if a.Type != ir.AttrTensor || a.Tensor == nil {
		return nil, n.Errorf("attribute value is %v, want a tensor", a.Type)
	}
	t := a.Tensor
	if !t.DType.Known() {
		return nil, n.Errorf("value has unsupported dtype %v", t.DType)
	}
	if err := checkNarrowValue(n, "value", t.DType, since); err != nil {
		return nil, err
	}
	if err := t.Check(); err != nil {
		return nil, n.Errorf("value: %w", err)
	}
	if t.Len() != 1 {
		return nil, n.Errorf("value must hold one element, got shape %v", t.Shape)
	}
	return t, nil
}

func inferConstantOfShape(n *ir.Node, in []Value, since int) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	val, err := fillValue(n, since)
	if err != nil {
		return nil, err
	}
	s := in[0]
	if err := shapeInput(n, s, "shape"); err != nil {
		return nil, err
	}
	dims, ok := SymOf(s)
	if !ok {
		if l, ok := vectorLen(s); ok {
			return []Value{Typed(val.DType, unknownDims(l))}, nil
		}
		return []Value{UnknownRank(val.DType)}, nil
	}
	if err := checkNonNegative(dims, "shape"); err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []Value{Typed(val.DType, copyShape(dims))}, nil
}

func runConstantOfShape(ctx *Context, n *ir.Node, in []*ir.Tensor, since int) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	val, err := fillValue(n, since)
	if err != nil {
		return nil, err
	}
	if in[0].DType != ir.Int64 {
		return nil, n.Errorf("shape must be int64, got %v", in[0].DType)
	}
	dims, err := intVector(in[0], "shape")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if _, err := checkedCount(dims); err != nil {
		return nil, n.Errorf("%w", err)
	}
	shape := intsOf64(dims)
	t, err := stridedView(ctx, val, 0, shape, make([]int, len(shape)))
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []*ir.Tensor{t}, nil
}

// rangeScalarType checks that a Range input has start's type and one element.
func rangeScalarType(n *ir.Node, v Value, what string, dt ir.DType) error {
	if v.Type.DType != dt {
		return n.Errorf("%s is %v, start is %v", what, v.Type.DType, dt)
	}
	if v.Type.RankKnown {
		if c, ok := v.Type.Shape.Concrete(); !ok || ir.NumElements(c) != 1 {
			return n.Errorf("%s must be a scalar, got shape %v", what, v.Type.Shape)
		}
	}
	return nil
}

// rangeCount computes max(ceil((limit-start)/delta), 0) with the size guard.
func rangeCount(start, limit, delta float64) (int, error) {
	if delta == 0 {
		return 0, fmt.Errorf("delta is 0")
	}
	c := math.Ceil((limit - start) / delta)
	if math.IsNaN(c) {
		return 0, fmt.Errorf("range(%v, %v, %v) has no defined length", start, limit, delta)
	}
	if c <= 0 {
		return 0, nil
	}
	if c > MaxOutputElements {
		return 0, fmt.Errorf("range(%v, %v, %v) would have more than %d elements", start, limit, delta, int64(MaxOutputElements))
	}
	return int(c), nil
}

// rangeCountInt is rangeCount for integers, computed exactly.
func rangeCountInt(start, limit, delta int64) (int, error) {
	if delta == 0 {
		return 0, fmt.Errorf("delta is 0")
	}
	// (limit-start) may overflow int64 for extreme values: use float for the guard.
	if f := (float64(limit) - float64(start)) / float64(delta); f > MaxOutputElements {
		return 0, fmt.Errorf("range(%d, %d, %d) would have more than %d elements", start, limit, delta, int64(MaxOutputElements))
	} else if f <= 0 {
		return 0, nil
	}
	span := limit - start
	if (span < limit) != (start > 0) {
		// limit-start overflowed int64: the float estimate is all there is
		f := math.Ceil((float64(limit) - float64(start)) / float64(delta))
		return int(f), nil
	}
	var c int64
	if delta > 0 {
		c = (span + delta - 1) / delta
	} else {
		c = (span + delta + 1) / delta
	}
	return int(max(c, 0)), nil
}

func inferRange(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 3); err != nil {
		return nil, err
	}
	dt := in[0].Type.DType
	for i, name := range []string{"start", "limit", "delta"} {
		if err := rangeScalarType(n, in[i], name, dt); err != nil {
			return nil, err
		}
	}
	if in[0].Const != nil && in[1].Const != nil && in[2].Const != nil {
		vals, err := rangeInputs(in[0].Const, in[1].Const, in[2].Const)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		c, err := vals.count()
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []Value{Typed(dt, ir.Shape{{Value: int64(c)}})}, nil
	}
	// range(0, n, 1) over a symbolic n has n elements
	if s, ok := SymOf(in[0]); ok && len(s) == 1 {
		if l, ok := SymOf(in[1]); ok && len(l) == 1 {
			if d, ok := SymOf(in[2]); ok && len(d) == 1 {
				sv, sok := SymInt(s[0])
				dv, dok := SymInt(d[0])
				if sok && dok && sv == 0 && dv == 1 {
					return []Value{Typed(dt, ir.Shape{l[0]})}, nil
				}
			}
		}
	}
	return []Value{Typed(dt, ir.Shape{ir.UnknownDim})}, nil
}

// rangeArgs holds Range's three scalars, as integers or floats.
type rangeArgs struct {
	isInt      bool
	si, li, di int64
	sf, lf, df float64
}

func (a rangeArgs) count() (int, error) {
	if a.isInt {
		return rangeCountInt(a.si, a.li, a.di)
	}
	return rangeCount(a.sf, a.lf, a.df)
}

func rangeInputs(start, limit, delta *ir.Tensor) (rangeArgs, error) {
	var a rangeArgs
	ts := []*ir.Tensor{start, limit, delta}
	for i, t := range ts {
		if t.DType != start.DType {
			return a, fmt.Errorf("input %d is %v, start is %v", i, t.DType, start.DType)
		}
		if t.Len() != 1 {
			return a, fmt.Errorf("input %d must be a scalar, got shape %v", i, t.Shape)
		}
	}
	switch start.DType {
	case ir.Float, ir.Double, ir.Float16, ir.BFloat16:
		f := func(t *ir.Tensor) float64 {
			switch d := t.Data.(type) {
			case []float32:
				return float64(d[0])
			case []uint16:
				if t.DType == ir.BFloat16 {
					return float64(ir.BFloat16ToFloat32(d[0]))
				}
				return float64(ir.Float16ToFloat32(d[0]))
			}
			return t.Data.([]float64)[0]
		}
		a.sf, a.lf, a.df = f(start), f(limit), f(delta)
	case ir.Int16, ir.Int32, ir.Int64:
		a.isInt = true
		v := make([]int64, 3)
		for i, t := range ts {
			x, err := t.AsInt64s()
			if err != nil {
				return a, err
			}
			v[i] = x[0]
		}
		a.si, a.li, a.di = v[0], v[1], v[2]
	default:
		return a, fmt.Errorf("unsupported dtype %v", start.DType)
	}
	return a, nil
}

func fillRangeInt[T int16 | int32 | int64](out []T, start, delta int64) {
	for i := range out {
		out[i] = T(start + int64(i)*delta)
	}
}

func fillRangeFloat[T float32 | float64](out []T, start, delta float64) {
	for i := range out {
		out[i] = T(start + float64(i)*delta)
	}
}

func runRange(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 3); err != nil {
		return nil, err
	}
	a, err := rangeInputs(in[0], in[1], in[2])
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	c, err := a.count()
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	out := ir.NewTensor(in[0].DType, []int{c})
	if dt := in[0].DType; dt == ir.Float16 || dt == ir.BFloat16 {
		// Range-27: computed in stash_type (float32 or float64), then rounded.
		stash, err := n.AttrInt("stash_type", int64(ir.Float))
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		if ir.DType(stash) != ir.Float && ir.DType(stash) != ir.Double {
			return nil, n.Errorf("stash_type %d is not float (1) or double (11)", stash)
		}
		wide := make([]float64, c)
		fillRangeFloat(wide, a.sf, a.df)
		d := out.Data.([]uint16)
		for i, v := range wide {
			// Both stash types narrow through float32 (for double, a
			// float16 tie could round differently than directly).
			f := float32(v)
			if dt == ir.BFloat16 {
				d[i] = ir.Float32ToBFloat16(f)
			} else {
				d[i] = ir.Float32ToFloat16(f)
			}
		}
		return []*ir.Tensor{out}, nil
	}
	switch d := out.Data.(type) {
	case []float32:
		fillRangeFloat(d, a.sf, a.df)
	case []float64:
		fillRangeFloat(d, a.sf, a.df)
	case []int16:
		fillRangeInt(d, a.si, a.di)
	case []int32:
		fillRangeInt(d, a.si, a.di)
	case []int64:
		fillRangeInt(d, a.si, a.di)
	}
	return []*ir.Tensor{out}, nil
}
