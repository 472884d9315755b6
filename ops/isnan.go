package ops

import (
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// IsNaN and IsInf: elementwise float classification into a bool tensor of
// the input's shape. IsInf's detect_negative and detect_positive (both 1 by
// default) choose which infinities count. IsNaN-13 adds bfloat16 and
// IsNaN-20 float8, which attnrun does not classify; IsInf-20 adds float16
// (taken) besides those.

// isInfTypes are the types IsInf takes before opset 20.
var isInfTypes = []ir.DType{ir.Float, ir.Double}

func init() {
	for _, r := range versions(9, 13, 20) {
		Register(&Schema{
			OpType: "IsNaN", Since: r[0], Until: r[1], MinInputs: 1, MaxInputs: 1,
			TypeInput: 0, DTypes: FloatTypes,
			Infer: inferClassify(FloatTypes, isNaNTest),
			Run:   runClassify(FloatTypes, isNaNTest),
			Doc:   "elementwise x is NaN (bool output)",
		})
	}
	for _, r := range typedVersions(typesFrom(20, isInfTypes, FloatTypes), 10, 20) {
		Register(&Schema{
			OpType: "IsInf", Since: r.since, Until: r.until, MinInputs: 1, MaxInputs: 1,
			TypeInput: 0, DTypes: r.types,
			Infer: inferClassify(r.types, isInfTest),
			Run:   runClassify(r.types, isInfTest),
			Doc:   "elementwise x is +Inf or -Inf, as detect_positive/detect_negative select (bool output)",
		})
	}
}

// isNaNTest returns IsNaN's test.
func isNaNTest(*ir.Node) (func(float64) bool, error) { return math.IsNaN, nil }

// isInfTest reads IsInf's attributes and returns the test they select.
func isInfTest(n *ir.Node) (func(float64) bool, error) {
	neg, err := n.AttrInt("detect_negative", 1)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	pos, err := n.AttrInt("detect_positive", 1)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return func(x float64) bool { return (pos != 0 && math.IsInf(x, 1)) || (neg != 0 && math.IsInf(x, -1)) }, nil
}

// inferClassify is the Infer of a float-to-bool elementwise op; test
// checks the node's attributes.
func inferClassify(allowed []ir.DType, test func(*ir.Node) (func(float64) bool, error)) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if err := needValues(n, in, 1); err != nil {
			return nil, err
		}
		if err := checkType(n, "input", in[0].Type.DType, allowed); err != nil {
			return nil, err
		}
		if _, err := test(n); err != nil {
			return nil, err
		}
		t := in[0].Type
		t.DType = ir.Bool
		t.Shape = slices.Clone(t.Shape)
		return []Value{{Type: t}}, nil
	}
}

// runClassify runs a float-to-bool elementwise op whose test test builds
// from the node.
func runClassify(allowed []ir.DType, test func(*ir.Node) (func(float64) bool, error)) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkTensors(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0]
		if err := checkType(n, "input", x.DType, allowed); err != nil {
			return nil, err
		}
		f, err := test(n)
		if err != nil {
			return nil, err
		}
		out, err := newOutput(ctx, ir.Bool, x.Shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		o := out.Bools()
		switch a := x.Data.(type) {
		case []float32:
			mapSlice(o, a, func(v float32) bool { return f(float64(v)) })
		case []float64:
			mapSlice(o, a, f)
		case []uint16: // float16
			mapSlice(o, a, func(v uint16) bool { return f(float64(ir.Float16ToFloat32(v))) })
		default:
			return nil, n.Errorf("unsupported element type %v", x.DType)
		}
		return []*ir.Tensor{out}, nil
	}
}
