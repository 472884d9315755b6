package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

// Variadic elementwise reductions over 1..N broadcast inputs: Max, Min, Sum
// and Mean. Max and Min propagate NaN (if any input is NaN at a position,
// so is the output), as ONNX specifies. Before opset 8 the inputs must all
// have one shape (broadcasting them, as attnrun does, only accepts more),
// and opset 1 carries the legacy consumed_inputs attribute; 12 adds integer
// types to Max and Min, 13 bfloat16.

type foldOp int

const (
	foldMax foldOp = iota
	foldMin
	foldSum
	foldMean
)

func init() {
	for _, f := range []struct {
		name   string
		op     foldOp
		doc    string
		ranges []opRange
	}{
		{"Max", foldMax, "elementwise maximum of 1..N broadcast inputs (NaN propagates)", typedVersions(typesFrom(12, FloatTypes, NumericTypes), 1, 6, 8, 12, 13)},
		{"Min", foldMin, "elementwise minimum of 1..N broadcast inputs (NaN propagates)", typedVersions(typesFrom(12, FloatTypes, NumericTypes), 1, 6, 8, 12, 13)},
		{"Sum", foldSum, "elementwise sum of 1..N broadcast inputs", typedVersions(always(FloatTypes), 1, 6, 8, 13)},
		{"Mean", foldMean, "elementwise mean of 1..N broadcast inputs", typedVersions(always(FloatTypes), 1, 6, 8, 13)},
	} {
		for _, r := range f.ranges {
			Register(&Schema{
				OpType: f.name, Since: r.since, Until: r.until,
				MinInputs: 1, MaxInputs: -1, TypeInput: 0, DTypes: r.types,
				Infer: inferSameTypeBroadcast(r.types, ir.Undefined),
				Run:   runFold(f.op, r.types),
				Doc:   f.doc,
			})
		}
	}
}

func runFold(op foldOp, allowed []ir.DType) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkTensors(n, in, max(len(in), 1)); err != nil {
			return nil, err
		}
		dt, err := sameTensorTypes(n, in)
		if err != nil {
			return nil, err
		}
		if err := checkType(n, "input", dt, allowed); err != nil {
			return nil, err
		}
		shape, err := broadcastOf(n, in...)
		if err != nil {
			return nil, err
		}
		out, err := newOutput(ctx, dt, shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		shapes := make([][]int, len(in))
		for i, t := range in {
			shapes[i] = t.Shape
		}
		switch o := out.Data.(type) {
		case []float32:
			err = fold(op, o, shape, dataOf[float32](in), shapes)
		case []float64:
			err = fold(op, o, shape, dataOf[float64](in), shapes)
		case []int64:
			err = fold(op, o, shape, dataOf[int64](in), shapes)
		case []int32:
			err = fold(op, o, shape, dataOf[int32](in), shapes)
		case []int16:
			err = fold(op, o, shape, dataOf[int16](in), shapes)
		case []int8:
			err = fold(op, o, shape, dataOf[int8](in), shapes)
		case []uint8:
			err = fold(op, o, shape, dataOf[uint8](in), shapes)
		case []uint16:
			if dt == ir.Float16 {
				f := make([][]float32, len(in))
				for i, t := range in {
					f[i] = halfToFloat32(t.Data.([]uint16))
				}
				of := make([]float32, len(o))
				err = fold(op, of, shape, f, shapes)
				float32ToHalf(o, of)
			} else {
				err = fold(op, o, shape, dataOf[uint16](in), shapes)
			}
		case []uint32:
			err = fold(op, o, shape, dataOf[uint32](in), shapes)
		case []uint64:
			err = fold(op, o, shape, dataOf[uint64](in), shapes)
		default:
			err = fmt.Errorf("unsupported element type %v", dt)
		}
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{out}, nil
	}
}

// dataOf returns the backing slices of ts, which Run has checked are all []T.
func dataOf[T any](ts []*ir.Tensor) [][]T {
	d := make([][]T, len(ts))
	for i, t := range ts {
		d[i] = t.Data.([]T)
	}
	return d
}

// fold computes o (of the broadcast shape) from the inputs.
func fold[T numElem](op foldOp, o []T, shape []int, ins [][]T, shapes [][]int) error {
	if err := broadcastCopy(o, shape, ins[0], shapes[0]); err != nil {
		return err
	}
	var l binLoops[T, T, T]
	switch op {
	case foldMax:
		l = elemLoops(maxNaN[T])
	case foldMin:
		l = elemLoops(minNaN[T])
	case foldSum, foldMean:
		l = binLoops[T, T, T]{vv: addVV[T], vs: addVS[T], sv: addSV[T]}
	default:
		return fmt.Errorf("unknown fold %d", op)
	}
	for k := 1; k < len(ins); k++ {
		if err := applyBinary(o, shape, o, shape, ins[k], shapes[k], l); err != nil {
			return err
		}
	}
	if op == foldMean && len(ins) > 1 {
		c := T(len(ins))
		for i := range o {
			o[i] /= c
		}
	}
	return nil
}

// maxNaN is the larger of a and b, or NaN if either is NaN.
func maxNaN[T numElem](a, b T) T {
	if a > b || a != a {
		return a
	}
	return b
}

// minNaN is the smaller of a and b, or NaN if either is NaN.
func minNaN[T numElem](a, b T) T {
	if a < b || a != a {
		return a
	}
	return b
}
