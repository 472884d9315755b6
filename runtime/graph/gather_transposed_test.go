package graph

import (
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestGatherTransposed: a table's rows gathered and transposed to put each
// row's values first (T5's position bias) run as one Gather of the table
// transposed; another permutation, or a table that is no constant, keeps
// both steps. Each output is the unfused plan's.
func TestGatherTransposed(t *testing.T) {
	const k, h, s = 32, 6, 40
	r := rand.New(rand.NewSource(4))
	table := randT(r, k, h)
	perm := func(p ...int64) *ir.Attribute { return &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: p} }
	for _, c := range []struct {
		name  string
		perm  *ir.Attribute
		input bool // the table a graph input, not an initializer
		steps string
	}{
		{"T5's bias: one Gather", perm(2, 0, 1), false, "Gather"},
		{"another permutation: kept", perm(1, 0, 2), false, "Gather Transpose"},
		{"a table that is an input: kept", perm(2, 0, 1), true, "Gather Transpose"},
	} {
		t.Run(c.name, func(t *testing.T) {
			syn := synth{
				inputs: []*ir.ValueInfo{vi("idx", ir.Int64, s, s)},
				inits:  map[string]*ir.Tensor{},
				nodes: []*ir.Node{node("Gather", []string{"table", "idx"}, []string{"g"}),
					node("Transpose", []string{"g"}, []string{"y"}, c.perm)},
				outputs: []string{"y"},
			}
			in := map[string]*ir.Tensor{"idx": ir.NewTensor(ir.Int64, []int{s, s})}
			for i := range in["idx"].Int64s() {
				in["idx"].Int64s()[i] = r.Int63n(2*k) - k // negative ones too
			}
			if c.input {
				syn.inputs = append(syn.inputs, vi("table", ir.Float, k, h))
				in["table"] = table
			} else {
				syn.inits["table"] = table
			}
			m := syn.model()
			m.Opsets[""] = 17
			wantSteps(t, m, in, c.steps)
			fused, unfused, _ := runBoth(t, m, in)
			sameOutputs(t, fused, unfused)
		})
	}
}
