package ops

import (
	"github.com/attnrun/attnrun/ir"
)

// InstanceNormalization (opsets 1, 6, 22): X of shape [N, C, D1, …] is
// normalized per sample and channel over its spatial positions, (x - mean)
// / sqrt(var + epsilon), then scaled by scale[c] and shifted by B[c]
// (both of shape [C]). It is GroupNormalization with one group per
// channel, and runs on its kernel (groupnorm.go). PyTorch (opset ≤ 17)
// exports nn.GroupNorm as Reshape to [N, groups, -1] → InstanceNormalization
// with unit scale and zero bias → Reshape back → Mul → Add.
//
// Versions 1 and 6 differ only in opset 1's consumed_inputs attribute (a
// legacy optimization hint, ignored); 22 adds bfloat16, which attnrun does
// not take here.

func init() {
	for _, r := range versions(1, 6, 22) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "InstanceNormalization", Since: r[0], Until: r[1],
			MinInputs: 3, MaxInputs: 3, TypeInput: 0, DTypes: FloatTypes,
			Infer: inferInstanceNorm, Run: runInstanceNorm,
			Doc:   "(x - mean) / sqrt(var + epsilon) * scale + B per sample and channel over the spatial dims",
			Notes: []string{"the mean and variance are accumulated in float64; float16 is computed in float32."},
		})
	}
}

func inferInstanceNorm(n *ir.Node, _ int, in []Value) ([]Value, error) {
	if _, err := normEpsilon(n); err != nil {
		return nil, err
	}
	return inferChannelNorm(n, in, []string{"X", "scale", "B"}, 1, true, []int{0, 1, 2})
}

func runInstanceNorm(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 3); err != nil {
		return nil, err
	}
	if _, err := inferInstanceNorm(n, 0, constValues(in)); err != nil {
		return nil, err
	}
	eps, _ := normEpsilon(n)
	x := in[0]
	y, err := newOutput(ctx, x.DType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	groupNormRows(ctx, x, y, x.Shape[1], floats64Of(in[1]), floats64Of(in[2]), eps)
	return []*ir.Tensor{y}, nil
}
