package ops

import (
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// MatMulInteger (opset 10) multiplies int8/uint8 matrices (numpy matmul
// rules: 1-D promotion, broadcast batch dims) after subtracting their zero
// points, accumulating in int32 (which wraps on overflow, as numpy's int32
// matmul in ONNX's reference does). a_zero_point is a scalar, or per row of
// A: M elements for a 2-D A, or shape [..., M, 1]; b_zero_point a scalar, or
// per column of B: N elements, or shape [..., 1, N]. A zero point has its
// input's type.

func init() {
	Register(&Schema{
		Domain: DomainONNX, OpType: "MatMulInteger", Since: 10, Until: MaxOpset,
		MinInputs: 2, MaxInputs: 4, TypeInput: 0, DTypes: []ir.DType{ir.Int8, ir.Uint8},
		Infer: inferMatMulInteger, Run: runMatMulInteger,
		Doc: "int32 matmul of int8/uint8 tensors less their zero points (per tensor, per row of A, per column of B)",
	})
}

var int8Types = []ir.DType{ir.Int8, ir.Uint8}

func inferMatMulInteger(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	for i, what := range []string{"A", "B", "a_zero_point", "b_zero_point"} {
		v := inVal(in, i)
		if !v.Present() {
			continue
		}
		if err := checkType(n, what, v.Type.DType, int8Types); err != nil {
			return nil, err
		}
		if i >= 2 && v.Type.DType != in[i-2].Type.DType {
			return nil, n.Errorf("%s is %v, its input %v", what, v.Type.DType, in[i-2].Type.DType)
		}
	}
	a, b := in[0], in[1]
	a.Type.DType, b.Type.DType = ir.Int32, ir.Int32
	return inferMatMul(n, opset, []Value{a, b})
}

// integerOperand returns x less its zero point as int32. zp of x's rank
// (or broadcastable to it) subtracts elementwise; a 1-D zp of length rows
// with perRow set subtracts per row of a matrix x.
func integerOperand(n *ir.Node, x, zp *ir.Tensor, perRow bool) (*ir.Tensor, error) {
	out, err := castTensor(nil, x, ir.Int32, defaultCastOptions)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if zp == nil {
		return out, nil
	}
	z, err := castTensor(nil, zp, ir.Int32, defaultCastOptions)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if perRow && z.Rank() == 1 && x.Rank() == 2 && z.Len() == x.Shape[0] && z.Len() != 1 {
		z = reshaped(z, []int{z.Len(), 1})
	}
	shape, err := BroadcastShapes(x.Shape, z.Shape)
	if err != nil || !slices.Equal(shape, x.Shape) {
		return nil, n.Errorf("zero point of shape %v does not broadcast to its input %v", zp.Shape, x.Shape)
	}
	res := ir.NewTensor(ir.Int32, x.Shape)
	if err := applyBinary(res.Data.([]int32), res.Shape, out.Data.([]int32), out.Shape, z.Data.([]int32), z.Shape,
		elemLoops(func(a, b int32) int32 { return a - b })); err != nil {
		return nil, n.Errorf("%w", err)
	}
	return res, nil
}

func runMatMulInteger(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 2); err != nil {
		return nil, err
	}
	if _, err := inferMatMulInteger(n, 10, constValues(in)); err != nil {
		return nil, err
	}
	a, err := integerOperand(n, in[0], inTensor(in, 2), true)
	if err != nil {
		return nil, err
	}
	b, err := integerOperand(n, in[1], inTensor(in, 3), false)
	if err != nil {
		return nil, err
	}
	return runMatMul(ctx, n, []*ir.Tensor{a, b})
}
