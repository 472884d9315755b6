package ops

import (
	"github.com/attnrun/attnrun/ir"
)

// PRelu (opsets 1, 6, 7, 9, 16): Y = X where X ≥ 0, slope·X where X < 0,
// with slope broadcasting unidirectionally to X (Y has X's shape). nn.PReLU
// exports it with a slope of shape [C, 1, …] (one per channel) or [1].
//
// Versions 1 and 6 say only that a one-element slope is shared across
// channels; attnrun broadcasts their slope as from 7, which covers that.
// Version 9 adds int32, int64, uint32 and uint64 (an unsigned X is never
// negative); 16 adds bfloat16, which attnrun does not take here. NaN stays
// NaN.

// preluTypes are PRelu's element types from opset 9.
var preluTypes = append(append([]ir.DType{}, FloatTypes...), ir.Int32, ir.Int64, ir.Uint32, ir.Uint64)

func init() {
	for _, r := range typedVersions(typesFrom(9, FloatTypes, preluTypes), 1, 6, 7, 9, 16) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "PRelu", Since: r.since, Until: r.until,
			MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: r.types,
			Infer: inferPRelu(r.types), Run: runPRelu(r.types),
			Doc: "elementwise x for x ≥ 0, slope*x below; slope broadcasts unidirectionally to X",
		})
	}
}

func inferPRelu(types []ir.DType) InferFunc {
	return func(n *ir.Node, _ int, in []Value) ([]Value, error) {
		if err := checkInferInputs(n, in, 2); err != nil {
			return nil, err
		}
		dt, err := sameValueTypes(n, in[:2])
		if err != nil {
			return nil, err
		}
		if err := checkType(n, "input", dt, types); err != nil {
			return nil, err
		}
		x, slope := in[0].Type, in[1].Type
		if !x.RankKnown {
			return []Value{UnknownRank(dt)}, nil
		}
		if slope.RankKnown && !dimsBroadcastTo(slope.Shape, x.Shape) {
			return nil, n.Errorf("slope of shape %s does not broadcast to X %s", shapeText(slope.Shape), shapeText(x.Shape))
		}
		return []Value{Typed(dt, append(ir.Shape{}, x.Shape...))}, nil
	}
}

func runPRelu(types []ir.DType) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkTensors(n, in, 2); err != nil {
			return nil, err
		}
		dt, err := sameTensorTypes(n, in[:2])
		if err != nil {
			return nil, err
		}
		if err := checkType(n, "input", dt, types); err != nil {
			return nil, err
		}
		x, slope := in[0], in[1]
		if shape, err := BroadcastShapes(x.Shape, slope.Shape); err != nil || !SameShape(shape, x.Shape) {
			return nil, n.Errorf("slope of shape %v does not broadcast to X %v", slope.Shape, x.Shape)
		}
		y, err := newOutput(ctx, dt, x.Shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		switch xs := x.Data.(type) {
		case []float32:
			err = prelu(y.Data.([]float32), xs, slope.Data.([]float32), x.Shape, slope.Shape)
		case []float64:
			err = prelu(y.Data.([]float64), xs, slope.Data.([]float64), x.Shape, slope.Shape)
		case []int32:
			err = prelu(y.Data.([]int32), xs, slope.Data.([]int32), x.Shape, slope.Shape)
		case []int64:
			err = prelu(y.Data.([]int64), xs, slope.Data.([]int64), x.Shape, slope.Shape)
		case []uint32:
			err = prelu(y.Data.([]uint32), xs, slope.Data.([]uint32), x.Shape, slope.Shape)
		case []uint64:
			err = prelu(y.Data.([]uint64), xs, slope.Data.([]uint64), x.Shape, slope.Shape)
		case []uint16: // float16
			ys := make([]float32, len(xs))
			err = prelu(ys, halfToFloat32(xs), halfToFloat32(slope.Data.([]uint16)), x.Shape, slope.Shape)
			float32ToHalf(y.Data.([]uint16), ys)
		}
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{y}, nil
	}
}

// prelu writes PRelu of x (of shape xShape, the output's) and slope into y.
func prelu[T numElem](y, x, slope []T, xShape, sShape []int) error {
	return applyBinary(y, xShape, x, xShape, slope, sShape, binLoops[T, T, T]{
		vv: func(o, a, b []T) {
			a, b = a[:len(o)], b[:len(o)]
			for i, v := range a {
				if v < 0 {
					v *= b[i]
				}
				o[i] = v
			}
		},
		vs: func(o, a []T, b T) {
			a = a[:len(o)]
			for i, v := range a {
				if v < 0 {
					v *= b
				}
				o[i] = v
			}
		},
		// X has the output's shape, so only a one-element X pairs with a
		// slope row.
		sv: func(o []T, a T, b []T) {
			for i := range o {
				o[i] = a
				if a < 0 {
					o[i] = a * b[i]
				}
			}
		},
	})
}
