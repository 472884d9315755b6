package ops

import (
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// IsNaN and IsInf: elementwise float classification into a bool tensor of
// the input's shape. IsInf's detect_negative and detect_positive (both 1 by
// default) choose which infinities count. IsNaN-13 and IsInf-20 only add
// types attnrun does not hold or support (bfloat16; float16 for IsInf at
// 20), so IsNaN has one schema for opsets 9-18 and IsInf one for 10-18,
// taking float32 and float64 as IsInf-10 does.

// isInfTypes are the types IsInf takes before opset 20.
var isInfTypes = []ir.DType{ir.Float, ir.Double}

func init() {
	Register(&Schema{
		OpType: "IsNaN", Since: 9, Until: 18, MinInputs: 1, MaxInputs: 1,
		TypeInput: 0, DTypes: FloatTypes,
		Infer: inferClassify(FloatTypes, isNaNTest),
		Run:   runClassify(FloatTypes, isNaNTest),
		Doc:   "elementwise x is NaN (bool output)",
	})
	Register(&Schema{
		OpType: "IsInf", Since: 10, Until: 18, MinInputs: 1, MaxInputs: 1,
		TypeInput: 0, DTypes: isInfTypes,
		Infer: inferClassify(isInfTypes, isInfTest),
		Run:   runClassify(isInfTypes, isInfTest),
		Doc:   "elementwise x is +Inf or -Inf, as detect_positive/detect_negative select (bool output)",
	})
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
