package ops

import (
	"github.com/attnrun/attnrun/ir"
)

// Dropout in inference: Y = X, and the optional mask output is all true
// (all ones of X's type before opset 10, bool after). From opset 12 ratio
// and training_mode are inputs; training mode with a non-zero ratio would
// need random numbers and is refused, since attnrun only runs inference.

func init() {
	for _, r := range [][2]int{{7, 9}, {10, 11}, {12, 12}, {13, 18}} {
		maxIn := 1
		if r[0] >= 12 {
			maxIn = 3
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "Dropout", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: maxIn, TypeInput: 0, DTypes: FloatTypes,
			Infer: inferDropout, Run: runDropout,
			Doc: "inference: identity, mask all true",
		})
	}
}

// dropoutMaskType is the mask's element type at an opset.
func dropoutMaskType(opset int, x ir.DType) ir.DType {
	if opset < 10 {
		return x
	}
	return ir.Bool
}

func checkDropoutNode(n *ir.Node) error {
	if len(n.Outputs) > 2 {
		return n.Errorf("has %d outputs, at most 2 (output, mask)", len(n.Outputs))
	}
	return nil
}

func inferDropout(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkComputeValues(n, in, 1); err != nil {
		return nil, err
	}
	if err := checkDropoutNode(n); err != nil {
		return nil, err
	}
	x := in[0].Type
	if err := checkComputeDType(n, "input", x.DType, FloatTypes); err != nil {
		return nil, err
	}
	if len(in) > 1 && in[1].Present() {
		if !in[1].Type.DType.IsFloat() {
			return nil, n.Errorf("ratio must be a float scalar, got %v", in[1].Type.DType)
		}
	}
	if len(in) > 2 && in[2].Present() && in[2].Type.DType != ir.Bool {
		return nil, n.Errorf("training_mode must be a bool scalar, got %v", in[2].Type.DType)
	}
	outs := []Value{{Type: x}}
	if len(n.Outputs) > 1 {
		m := x
		m.DType = dropoutMaskType(opset, x.DType)
		outs = append(outs, Value{Type: m})
	}
	return outs, nil
}

func runDropout(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 1); err != nil {
		return nil, err
	}
	if err := checkDropoutNode(n); err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkComputeDType(n, "input", x.DType, FloatTypes); err != nil {
		return nil, err
	}
	opset := MaxOpset
	if ctx != nil && ctx.Opset > 0 {
		opset = ctx.Opset
	}
	if len(in) > 2 && in[2] != nil {
		tm := in[2]
		if tm.DType != ir.Bool || tm.Len() != 1 {
			return nil, n.Errorf("training_mode must be a bool scalar, got %v of shape %v", tm.DType, tm.Shape)
		}
		if tm.Bools()[0] {
			ratio := 0.5
			if in[1] != nil {
				r, ok := dropoutScalar(in[1])
				if !ok {
					return nil, n.Errorf("ratio must be a float scalar, got %v of shape %v", in[1].DType, in[1].Shape)
				}
				ratio = r
			}
			if ratio != 0 {
				return nil, n.Errorf("training mode with ratio %g is not supported (attnrun runs inference only)", ratio)
			}
		}
	}
	outs := []*ir.Tensor{x.Clone()}
	if len(n.Outputs) > 1 {
		mt := dropoutMaskType(opset, x.DType)
		mask := ir.NewTensor(mt, x.Shape)
		switch d := mask.Data.(type) {
		case []bool:
			for i := range d {
				d[i] = true
			}
		case []float32:
			for i := range d {
				d[i] = 1
			}
		case []float64:
			for i := range d {
				d[i] = 1
			}
		case []uint16: // float16
			one := ir.Float32ToFloat16(1)
			for i := range d {
				d[i] = one
			}
		}
		outs = append(outs, mask)
	}
	return outs, nil
}

// dropoutScalar reads a one-element float tensor.
func dropoutScalar(t *ir.Tensor) (float64, bool) {
	if t.Len() != 1 {
		return 0, false
	}
	switch d := t.Data.(type) {
	case []float32:
		return float64(d[0]), true
	case []float64:
		return d[0], true
	case []uint16:
		if t.DType == ir.Float16 {
			return float64(ir.Float16ToFloat32(d[0])), true
		}
	}
	return 0, false
}
