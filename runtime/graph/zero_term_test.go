package graph

import (
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestZeroScoresTermDropped: diffusers' baddbmm(empty, q, kᵀ, beta=0)
// exports as scores + ConstantOfShape([B·H, S, S])·0. The fusion reads
// that term as no mask, whether plan-time folding made it a constant of
// zeros (small S) or, past maxFoldElements, it is still ConstantOfShape
// and Mul steps: then those steps go too, so no run makes the B·H·S²
// tensor. The fused outputs equal the unfused graph's.
func TestZeroScoresTermDropped(t *testing.T) {
	m, p := compileModel(t, "diffusers_spatial_attention")
	r := rand.New(rand.NewSource(1))
	// 4 heads: B·H·S² is 4·12² (folded) and 4·(33·32)² > 1<<22 (not).
	for _, c := range []struct {
		shape    []int
		replaced string
	}{
		{[]int{1, 32, 3, 4}, "Transpose MatMul Mul Add Cast Softmax Cast MatMul"},
		{[]int{1, 32, 33, 32}, "ConstantOfShape Transpose MatMul Mul Mul Add Cast Softmax Cast MatMul"},
	} {
		shape := c.shape
		in := map[string]*ir.Tensor{"x": randT(r, shape...)}
		fused, unfused, fs := runBoth(t, m, in)
		sameOutputs(t, fused, unfused)
		n := oneFusion(t, fs, c.replaced)
		for _, name := range n.Inputs[3:] {
			if name != "" {
				t.Errorf("%v: fused node reads %v beyond Q, K, V, want no mask", shape, n.Inputs)
			}
		}
		pl, err := p.planFor(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range pl.steps {
			if st.node.OpType == "ConstantOfShape" || (st.node.OpType == "Mul" && st.node.Name == "/Mul_5") {
				t.Errorf("%v: %s %q is still a step", shape, st.node.OpType, st.node.Name)
			}
		}
	}
}
