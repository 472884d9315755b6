package graph

import (
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// TestGemmAsFusedMatMul: a Gemm that is a Linear layer (constant B, either
// layout, an optional bias of N elements, alpha and beta 1, A as is) runs
// as FusedMatMul, which packs B once; every other Gemm stays a Gemm. Both
// agree with the unfused plan.
func TestGemmAsFusedMatMul(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	const m, k, n = 5, 7, 6
	f := func(name string, v float32) *ir.Attribute {
		return &ir.Attribute{Name: name, Type: ir.AttrFloat, Float: v}
	}
	i := func(name string, v int64) *ir.Attribute { return &ir.Attribute{Name: name, Type: ir.AttrInt, Int: v} }
	for _, c := range []struct {
		name  string
		attrs []*ir.Attribute
		b     *ir.Tensor // nil: B is a graph input
		c     *ir.Tensor // nil: no C
		fused bool
	}{
		{"B [K,N], no C", nil, randT(r, k, n), nil, true},
		{"transB, bias [N]", []*ir.Attribute{i("transB", 1)}, randT(r, n, k), randT(r, n), true},
		{"transB, bias [1,N]", []*ir.Attribute{i("transB", 1), f("beta", 1)}, randT(r, n, k), randT(r, 1, n), true},
		{"bias [M,N]", nil, randT(r, k, n), randT(r, m, n), false},
		{"bias [1]", nil, randT(r, k, n), randT(r, 1), false},
		{"alpha 2", []*ir.Attribute{f("alpha", 2)}, randT(r, k, n), randT(r, n), false},
		{"beta 0.5", []*ir.Attribute{f("beta", 0.5)}, randT(r, k, n), randT(r, n), false},
		{"B an input", nil, nil, randT(r, n), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := synth{inputs: []*ir.ValueInfo{vi("a", ir.Float, m, k)}, inits: map[string]*ir.Tensor{}, outputs: []string{"y"}}
			in := map[string]*ir.Tensor{"a": randT(r, m, k)}
			if c.b != nil {
				s.inits["b"] = c.b
			} else {
				s.inputs = append(s.inputs, vi("b", ir.Float, k, n))
				in["b"] = randT(r, k, n)
			}
			args := []string{"a", "b"}
			if c.c != nil {
				s.inits["c"] = c.c
				args = append(args, "c")
			}
			s.nodes = []*ir.Node{node("Gemm", args, []string{"y"}, c.attrs...)}
			fused, unfused, fs := runFusedOp(t, s.model(), in, ops.FusedMatMulOp)
			sameOutputs(t, fused, unfused)
			if !c.fused {
				if len(fs) != 0 {
					t.Fatalf("fusions %v, want none", fs)
				}
				return
			}
			fn := oneFusion(t, fs, "Gemm")
			if fn.OpType != "FusedMatMul" || len(fn.Inputs) != len(args) {
				t.Errorf("fused into %s with inputs %v, want FusedMatMul of %v", fn.OpType, fn.Inputs, args)
			}
		})
	}
}
