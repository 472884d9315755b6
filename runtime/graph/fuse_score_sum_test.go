package graph

import (
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// TestMergeScoreSums checks that scores summed from two products (ESPnet's
// relative-position attention) become one product of the joined operands
// that the attention fusion then fuses whole, with no bias, in each
// operand layout, with the unfused graph's results; and that sums the
// rewrite must not touch stay as they are.
func TestMergeScoreSums(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	const b, h, s, d, d2 = 2, 3, 9, 8, 4
	perm := func(p ...int64) *ir.Attribute { return intsAttr("perm", p) }
	// espnet is ESPnet's scores: q_u and q_v [b, s, h, d] split into heads,
	// k [b, s, h, d] and the position embeddings p [1, s, h, d] split and
	// transposed for the product in one Transpose each.
	espnet := []*ir.Node{
		node("Transpose", []string{"qu"}, []string{"qut"}, perm(0, 2, 1, 3)),
		node("Transpose", []string{"qv"}, []string{"qvt"}, perm(0, 2, 1, 3)),
		node("Transpose", []string{"k"}, []string{"kt"}, perm(0, 2, 3, 1)),
		node("Transpose", []string{"p"}, []string{"pt"}, perm(0, 2, 3, 1)),
		node("MatMul", []string{"qut", "kt"}, []string{"ac"}),
		node("MatMul", []string{"qvt", "pt"}, []string{"bd"}),
		node("Add", []string{"ac", "bd"}, []string{"sum"}),
	}
	// plain is a sum of products of operands given in the products'
	// layout, of head dims d and d2.
	plain := []*ir.Node{
		node("MatMul", []string{"a1", "b1"}, []string{"ac"}),
		node("MatMul", []string{"a2", "b2"}, []string{"bd"}),
		node("Add", []string{"ac", "bd"}, []string{"sum"}),
	}
	attend := []*ir.Node{
		node("Div", []string{"sum", "root"}, []string{"scaled"}),
		node("Softmax", []string{"scaled"}, []string{"w"}, &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}),
		node("MatMul", []string{"w", "v"}, []string{"y"}),
	}
	chain := func(parts ...[]*ir.Node) []*ir.Node { return slices.Concat(parts...) }
	cases := []struct {
		name    string
		nodes   []*ir.Node
		outputs []string // besides y
		merged  bool
		bias    bool // the fused attention reads the second product (unmerged)
	}{
		{"ESPnet: heads split by Transposes, position embeddings of batch 1", chain(espnet, attend), nil, true, false},
		{"operands in the products' layout, head dims 8 and 4", chain(plain, attend), nil, true, false},
		{"Transposes by different permutations: joined after them", chain([]*ir.Node{
			node("Transpose", []string{"qu"}, []string{"qut"}, perm(0, 2, 1, 3)),
			node("Transpose", []string{"a2s"}, []string{"qvt"}, perm(0, 1, 2, 3)),
			node("MatMul", []string{"qut", "b1"}, []string{"ac"}),
			node("MatMul", []string{"qvt", "b2"}, []string{"bd"}),
			node("Add", []string{"ac", "bd"}, []string{"sum"})}, attend), nil, true, false},
		{"a product also an output", chain(espnet, attend), []string{"bd"}, false, true},
		{"no Softmax reads the sum", chain(espnet, []*ir.Node{node("Div", []string{"sum", "root"}, []string{"y"})}), nil, false, false},
		{"the Add broadcasts one product", chain([]*ir.Node{
			node("MatMul", []string{"a1", "b1"}, []string{"ac"}),
			node("MatMul", []string{"a1h", "b1h"}, []string{"bd"}),
			node("Add", []string{"ac", "bd"}, []string{"sum"})}, attend), nil, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := synth{
				inputs: []*ir.ValueInfo{
					vi("qu", ir.Float, b, s, h, d), vi("qv", ir.Float, b, s, h, d), vi("k", ir.Float, b, s, h, d), vi("p", ir.Float, 1, s, h, d),
					vi("a1", ir.Float, b, h, s, d), vi("b1", ir.Float, b, h, d, s), vi("a2", ir.Float, b, h, s, d2), vi("b2", ir.Float, b, h, d2, s),
					vi("a2s", ir.Float, b, h, s, d2), vi("a1h", ir.Float, b, 1, s, d), vi("b1h", ir.Float, b, 1, d, s),
					vi("v", ir.Float, b, h, s, d),
				},
				inits:   map[string]*ir.Tensor{"root": sc(2.8284271)},
				nodes:   c.nodes,
				outputs: append([]string{"y"}, c.outputs...),
			}.model()
			in := synthInputs(r, m, nil)
			fused, unfused, attn := runAll(t, m, in)
			for _, o := range append([]string{"y"}, c.outputs...) {
				sameOutputs(t, fused[o], unfused[o])
			}
			_, merges := fusedPlan(t, m, in, func(f Fusion) bool {
				return f.Node.OpType == "MatMul" && strings.HasPrefix(f.Node.Name, ops.AttentionTempPrefix)
			})
			if !c.merged {
				if len(merges) != 0 {
					t.Fatalf("merged %s", merges[0].Describe())
				}
			} else {
				oneFusion(t, merges, "MatMul MatMul Add")
			}
			if strings.HasPrefix(c.name, "no Softmax") {
				return
			}
			if len(attn) != 1 {
				t.Fatalf("%d attention fusions, want 1", len(attn))
			}
			if got := slices.Contains(attn[0].Node.Inputs, "bd"); got != c.bias {
				t.Errorf("fused attention reads the second product as a mask or bias: %v, want %v (%s)", got, c.bias, attn[0].Describe())
			}
		})
	}
}
