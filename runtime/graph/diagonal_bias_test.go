package graph

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// TestDiagonalBiases checks diagonalBiases on additive terms of the scores:
// each case runs fused and unfused with the outputs compared, and the fused
// node must take the term by its diagonals (bias_diagonals, a plan constant
// [1, H, 2S − 1]) exactly when every matrix of it is constant along its
// diagonals and it holds more than two values; a Gather it replaces must
// not run.
func TestDiagonalBiases(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	const h, d, buckets = 3, 4, 7
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 1, 3, 2}}
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	chain := func(term string) []*ir.Node {
		return []*ir.Node{
			node("Transpose", []string{"k"}, []string{"kt"}, perm),
			node("MatMul", []string{"q", "kt"}, []string{"s0"}),
			node("Add", []string{"s0", term}, []string{"s1"}),
			node("Softmax", []string{"s1"}, []string{"p"}, axis),
			node("MatMul", []string{"p", "v"}, []string{"y"})}
	}
	// toeplitz returns [h, s, s] values of j − i: a random value for each
	// head and distance.
	toeplitz := func(s int) *ir.Tensor {
		diag := randT(r, h, 2*s-1)
		t := ir.NewTensor(ir.Float, []int{1, h, s, s})
		for at := range t.Float32s() {
			m, i, j := at/(s*s), at/s%s, at%s
			t.Float32s()[at] = diag.Float32s()[m*(2*s-1)+i-j+s-1]
		}
		return t
	}
	// bucketsOf returns T5-like [s, s] indices of j − i: the distance
	// clamped to ±3, negative ones counted from the table's end.
	bucketsOf := func(s int) []int64 {
		b := make([]int64, s*s)
		for at := range b {
			b[at] = int64(min(max(at%s-at/s, -3), 3))
		}
		return b
	}
	gather := []*ir.Node{
		node("Gather", []string{"table", "buckets"}, []string{"g"}, &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: 1}),
		node("Unsqueeze", []string{"g", "axes0"}, []string{"pb"})}
	// Past 4Mi elements the gathered bias [3, 1200, 1200] is not folded:
	// the Gather runs on every call unless the node takes the diagonals.
	const long = 1200
	b64 := bucketsOf(long)
	b32 := make([]int32, len(b64))
	for i, v := range b64 {
		b32[i] = int32(v)
	}
	skew := slices.Clone(b64)
	skew[long*long/2+7]++ // one element off its diagonal's value
	twoValued := ir.NewTensor(ir.Float, []int{1, 1, 9, 9})
	for at := range twoValued.Float32s() {
		if at%9 > at/9 {
			twoValued.Float32s()[at] = -1e9
		}
	}
	cases := []struct {
		name     string
		s        int
		inits    map[string]*ir.Tensor
		nodes    []*ir.Node
		diagonal bool
		gather   bool // a Gather step runs in the fused plan
	}{
		{name: "a constant of j − i", s: 9, inits: map[string]*ir.Tensor{"pb": toeplitz(9)}, nodes: chain("pb"), diagonal: true},
		{name: "a random constant", s: 9, inits: map[string]*ir.Tensor{"pb": randT(r, 1, h, 9, 9)}, nodes: chain("pb")},
		{name: "a causal mask of 0 and -1e9: a mask, left as it is", s: 9, inits: map[string]*ir.Tensor{"pb": twoValued}, nodes: chain("pb")},
		{name: "gathered by int64 buckets of j − i", s: long, diagonal: true,
			inits: map[string]*ir.Tensor{"table": randT(r, h, buckets), "buckets": ir.FromSlice([]int{long, long}, b64), "axes0": int64s(0)},
			nodes: slices.Concat(gather, chain("pb"))},
		{name: "gathered by int32 buckets of j − i", s: long, diagonal: true,
			inits: map[string]*ir.Tensor{"table": randT(r, h, buckets), "buckets": ir.FromSlice([]int{long, long}, b32), "axes0": int64s(0)},
			nodes: slices.Concat(gather, chain("pb"))},
		{name: "gathered by buckets with one off their diagonal", s: long, gather: true,
			inits: map[string]*ir.Tensor{"table": randT(r, h, buckets), "buckets": ir.FromSlice([]int{long, long}, skew), "axes0": int64s(0)},
			nodes: slices.Concat(gather, chain("pb"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			syn := synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, 1, h, c.s, d), vi("k", ir.Float, 1, h, c.s, d), vi("v", ir.Float, 1, h, c.s, d)},
				inits: c.inits, nodes: c.nodes, outputs: []string{"y"}}
			m := syn.model()
			in := synthInputs(r, m, nil)
			fused, unfused, fs := runBoth(t, m, in)
			sameOutputs(t, fused, unfused)
			if len(fs) != 1 {
				t.Fatalf("%d fusions, want 1", len(fs))
			}
			n := fs[0].Node
			if diag, _ := n.AttrInt("bias_diagonals", 0); (diag == 1) != c.diagonal {
				t.Fatalf("fused node %s: bias_diagonals %d, want %v", fs[0].Describe(), diag, c.diagonal)
			}
			p, err := Compile(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			if c.diagonal {
				types, err := p.Plan(in)
				if err != nil {
					t.Fatal(err)
				}
				if v := types[n.Input(5)]; v.Const == nil || !ops.SameShape(v.Const.Shape, []int{1, h, 2*c.s - 1}) || n.Input(3) != "" {
					t.Errorf("fused node %s: bias %s of %v, want a constant [1 %d %d] and no mask", fs[0].Describe(), n.Input(5), v.Type, h, 2*c.s-1)
				}
			}
			steps, err := p.Steps(in)
			if err != nil {
				t.Fatal(err)
			}
			if ran := slices.ContainsFunc(steps, func(n *ir.Node) bool { return n.OpType == "Gather" }); ran != c.gather {
				t.Errorf("a Gather step runs: %v, want %v", ran, c.gather)
			}
		})
	}
}
