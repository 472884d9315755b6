package ops

import (
	"github.com/attnrun/attnrun/ir"
)

// Hardmax: 1 where an element is the largest of its row, 0 elsewhere, with
// only the first maximum of a row set (a NaN counts as the maximum, as
// numpy's argmax in the ONNX reference does). Before opset 13 the input is
// coerced to 2-D at axis (default 1) and a row is the whole flattened
// trailing block; from 13 a row runs along axis (default -1) only. A
// negative axis needs opset 11.

func init() {
	for _, r := range versions(1, 11, 13) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "Hardmax", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: FloatTypes,
			Infer: inferRowOp(hardmaxAxis), Run: runHardmax,
			Doc: "one-hot of the first maximum along axis (before opset 13: of the input coerced to 2-D at axis)",
		})
	}
}

// hardmaxAxis reads and normalizes axis for the opset: Softmax's rule,
// except that a negative axis needs opset 11.
func hardmaxAxis(n *ir.Node, opset, rank int) (int, error) {
	if axis, err := n.AttrInt("axis", 0); err == nil && axis < 0 && opset < 11 {
		return 0, n.Errorf("negative axis %d needs opset 11 or later", axis)
	}
	return softmaxAxis(n, opset, rank)
}

func runHardmax(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkComputeDType(n, "input", x.DType, FloatTypes); err != nil {
		return nil, err
	}
	opset := ctx.EffectiveOpset()
	axis, err := hardmaxAxis(n, opset, x.Rank())
	if err != nil {
		return nil, err
	}
	outer := int(ir.NumElements(x.Shape[:axis]))
	size, inner := x.Shape[axis], int(ir.NumElements(x.Shape[axis+1:]))
	if opset < 13 {
		size, inner = size*inner, 1
	}
	out, err := newOutput(ctx, x.DType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	idx := make([]int64, outer*inner)
	switch d := x.Data.(type) {
	case []float32:
		argIndex(idx, d, outer, size, inner, false, false)
	case []float64:
		argIndex(idx, d, outer, size, inner, false, false)
	case []uint16: // float16
		argIndex(idx, halfToFloat32s(d), outer, size, inner, false, false)
	default:
		return nil, n.Errorf("unsupported element type %v", x.DType)
	}
	if size == 0 {
		return []*ir.Tensor{out}, nil
	}
	// out is zeroed; set the one element of each row.
	switch o := out.Data.(type) {
	case []float32:
		hardmaxSet(o, idx, outer, size, inner, 1)
	case []float64:
		hardmaxSet(o, idx, outer, size, inner, 1)
	case []uint16:
		hardmaxSet(o, idx, outer, size, inner, ir.Float32ToFloat16(1))
	}
	return []*ir.Tensor{out}, nil
}

// hardmaxSet sets o, laid out outer×size×inner, to one at each row's index
// in idx (one entry per outer×inner position).
func hardmaxSet[T any](o []T, idx []int64, outer, size, inner int, one T) {
	for p := 0; p < outer; p++ {
		for j := 0; j < inner; j++ {
			o[(p*size+int(idx[p*inner+j]))*inner+j] = one
		}
	}
}
