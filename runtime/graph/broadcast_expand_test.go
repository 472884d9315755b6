package graph

import (
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestDropBroadcastExpands runs graphs with Expands fused (the plan-time
// rewrites on) and unfused, compares every output, and checks which steps
// the fused plan runs: an Expand that only element-wise ops read, each
// giving the same shape from its input, is dropped; the others stay.
func TestDropBroadcastExpands(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	const b, s, d = 3, 5, 8
	inits := map[string]*ir.Tensor{"full": int64s(b, s, d), "eps": sc(1e-12), "axes": int64s(-1)}
	// normalize is F.normalize(x, dim=-1) as torch exports it at opset 18.
	normalize := []*ir.Node{
		node("ReduceL2", []string{"x", "axes"}, []string{"n"}),
		node("Clip", []string{"n", "eps"}, []string{"nc"}),
		node("Expand", []string{"nc", "full"}, []string{"ne"}),
		node("Div", []string{"x", "ne"}, []string{"y"})}
	x := []*ir.ValueInfo{vi("x", ir.Float, b, s, d)}
	cases := []struct {
		name    string
		nodes   []*ir.Node
		outputs []string
		steps   string
	}{
		{"F.normalize: Div broadcasts the norm, then fuses (fuse_l2norm.go)", normalize, nil, "NormalizeL2"},
		{"the expanded norm also an output", normalize, []string{"ne"}, "ReduceL2 Clip Expand Div"},
		{"a unary op would change shape", []*ir.Node{node("Expand", []string{"x1", "full"}, []string{"e"}), node("Neg", []string{"e"}, []string{"y"})}, nil, "Expand Neg"},
		{"one reader broadcasts, one does not", []*ir.Node{
			node("ReduceL2", []string{"x", "axes"}, []string{"n"}), node("Expand", []string{"n", "full"}, []string{"ne"}),
			node("Div", []string{"x", "ne"}, []string{"y"}), node("Sqrt", []string{"ne"}, []string{"z"})}, []string{"z"}, "ReduceL2 Expand Div Sqrt"},
		{"both operands expanded: the output would shrink", []*ir.Node{
			node("Expand", []string{"x1", "full"}, []string{"e1"}), node("Expand", []string{"x1", "full"}, []string{"e2"}),
			node("Add", []string{"e1", "e2"}, []string{"y"})}, nil, "Expand Add"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opset18 := func(m *ir.Model) *ir.Model { m.Opsets[""] = 18; return m }
			m := opset18(synth{inputs: append(x, vi("x1", ir.Float, b, s, 1)), inits: inits, nodes: c.nodes, outputs: append([]string{"y"}, c.outputs...)}.model())
			in := synthInputs(r, m, nil)
			fused, unfused, _ := runAll(t, m, in)
			for _, o := range append([]string{"y"}, c.outputs...) {
				sameOutputs(t, fused[o], unfused[o])
			}
			p, err := Compile(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			if g := stepOpTypes(t, p, in); g != c.steps {
				t.Errorf("steps %s, want %s", g, c.steps)
			}
		})
	}
}
