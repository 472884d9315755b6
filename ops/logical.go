package ops

import (
	"strings"

	"github.com/attnrun/attnrun/ir"
)

// Logical ops on bool tensors: Not, and And, Or, Xor with numpy broadcasting.

func init() {
	Register(&Schema{
		OpType: "Not", Since: 1, Until: MaxOpset, MinInputs: 1, MaxInputs: 1,
		TypeInput: 0, DTypes: boolOnly,
		Infer: inferUnary(boolOnly),
		Run:   runNot,
		Doc:   "elementwise logical not",
	})
	for _, l := range []struct {
		name string
		f    func(a, b bool) bool
	}{
		{"And", func(a, b bool) bool { return a && b }},
		{"Or", func(a, b bool) bool { return a || b }},
		{"Xor", func(a, b bool) bool { return a != b }},
	} {
		f := l.f
		Register(&Schema{
			OpType: l.name, Since: 7, Until: MaxOpset, MinInputs: 2, MaxInputs: 2,
			TypeInput: 0, DTypes: boolOnly,
			Infer: inferSameTypeBroadcast(boolOnly, ir.Bool),
			Run:   runLogical(f),
			Doc:   "elementwise logical " + strings.ToLower(l.name) + " with broadcasting",
		})
	}
}

func runNot(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkTensors(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkType(n, "input", x.DType, boolOnly); err != nil {
		return nil, err
	}
	out, err := newOutput(ctx, ir.Bool, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	o := out.Bools()
	for i, v := range x.Bools() {
		o[i] = !v
	}
	return []*ir.Tensor{out}, nil
}

func runLogical(f func(a, b bool) bool) RunFunc {
	loops := elemLoops(f)
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkTensors(n, in, 2); err != nil {
			return nil, err
		}
		for i := 0; i < 2; i++ {
			if err := checkType(n, "input", in[i].DType, boolOnly); err != nil {
				return nil, err
			}
		}
		shape, err := broadcastOf(n, in[0], in[1])
		if err != nil {
			return nil, err
		}
		out, err := newOutput(ctx, ir.Bool, shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		if err := applyBinary(out.Data.([]bool), shape, in[0].Data.([]bool), in[0].Shape, in[1].Data.([]bool), in[1].Shape, loops); err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{out}, nil
	}
}
