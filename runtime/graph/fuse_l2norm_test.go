package graph

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// TestFuseL2Norm checks that the L2 normalizations of real exports
// (F.normalize, x / x.norm()) become one NormalizeL2 step with the chain's
// results bit for bit, that the step reads a q split from a qkv projection
// through a view, so that the movement steps no longer run, and that
// chains the rewrite must not touch stay as they are.
func TestFuseL2Norm(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	const b, n, h, d = 2, 5, 3, 8
	axes := func(a ...int64) *ir.Attribute { return intsAttr("axes", a) }
	// normalize is F.normalize(x, dim=-1) as torch 1.13 exports it
	// (opset 17: axes an attribute, Clip's max omitted as "").
	// full is x's shape, for the Expand.
	normalize := func(x, full string, ax *ir.Attribute) []*ir.Node {
		return []*ir.Node{
			node("ReduceL2", []string{x}, []string{"nrm"}, ax, &ir.Attribute{Name: "keepdims", Type: ir.AttrInt, Int: 1}),
			node("Clip", []string{"nrm", "eps", ""}, []string{"nc"}),
			node("Expand", []string{"nc", full}, []string{"ne"}),
			node("Div", []string{x, "ne"}, []string{"y"})}
	}
	// qSplit is Swin V2's q: qkv [b, n, 3·h·d] reshaped to [b, n, 3, h, d],
	// transposed to [3, b, h, n, d], index 0.
	qSplit := []*ir.Node{
		node("Reshape", []string{"qkv", "split"}, []string{"r5"}),
		node("Transpose", []string{"r5"}, []string{"t5"}, intsAttr("perm", []int64{2, 0, 3, 1, 4})),
		node("Gather", []string{"t5", "zero"}, []string{"q"}, &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: 0}),
	}
	chain := func(parts ...[]*ir.Node) []*ir.Node {
		var all []*ir.Node
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	cases := []struct {
		name    string
		nodes   []*ir.Node
		outputs []string // besides y
		fused   string   // the replaced op types, "" when nothing may fuse
		steps   string   // the steps the fused plan runs
		// absorbed: the movement steps the fused step reads through
		absorbed string
	}{
		{"F.normalize", normalize("x", "full", axes(-1)), nil, "ReduceL2 Clip Div", "NormalizeL2", ""},
		{"x / x.norm(dim=-1, keepdim=True)", []*ir.Node{
			node("ReduceL2", []string{"x"}, []string{"nrm"}, axes(2)),
			node("Div", []string{"x", "nrm"}, []string{"y"})}, nil, "ReduceL2 Div", "NormalizeL2", ""},
		{"over two trailing axes", normalize("x", "full", axes(-1, -2)), nil, "ReduceL2 Clip Div", "NormalizeL2", ""},
		{"Swin V2's q read through the qkv split", chain(qSplit, normalize("q", "fullq", axes(-1))), nil, "ReduceL2 Clip Div", "NormalizeL2", "Reshape Transpose Gather"},
		{"the split q also an output: read as it is", chain(qSplit, normalize("q", "fullq", axes(-1))), []string{"q"}, "ReduceL2 Clip Div", "Reshape Transpose Gather NormalizeL2", ""},
		{"the norm also an output", normalize("x", "full", axes(-1)), []string{"nrm"}, "", "ReduceL2 Clip Div", ""},
		{"not the trailing axis", normalize("x", "full", axes(1)), nil, "", "ReduceL2 Clip Div", ""},
		{"Clip with a max", []*ir.Node{
			node("ReduceL2", []string{"x"}, []string{"nrm"}, axes(-1)),
			node("Clip", []string{"nrm", "eps", "big"}, []string{"nc"}),
			node("Div", []string{"x", "nc"}, []string{"y"})}, nil, "", "ReduceL2 Clip Div", ""},
		{"Clip to a negative floor", []*ir.Node{
			node("ReduceL2", []string{"x"}, []string{"nrm"}, axes(-1)),
			node("Clip", []string{"nrm", "neg"}, []string{"nc"}),
			node("Div", []string{"x", "nc"}, []string{"y"})}, nil, "", "ReduceL2 Clip Div", ""},
		{"the norm divided by x", []*ir.Node{
			node("ReduceL2", []string{"x"}, []string{"nrm"}, axes(-1)),
			node("Div", []string{"nrm", "x"}, []string{"y"})}, nil, "", "ReduceL2 Div", ""},
		{"another tensor divided by x's norm", []*ir.Node{
			node("ReduceL2", []string{"x"}, []string{"nrm"}, axes(-1)),
			node("Div", []string{"w", "nrm"}, []string{"y"})}, nil, "", "ReduceL2 Div", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := synth{
				inputs: []*ir.ValueInfo{vi("x", ir.Float, b, n, d), vi("w", ir.Float, b, n, d), vi("qkv", ir.Float, b, n, 3*h*d)},
				inits: map[string]*ir.Tensor{"eps": sc(1e-12), "big": sc(2), "neg": sc(-1), "full": int64s(b, n, d),
					"fullq": int64s(b, h, n, d), "split": int64s(b, n, 3, h, d), "zero": ir.Scalar(int64(0))},
				nodes:   c.nodes,
				outputs: append([]string{"y"}, c.outputs...),
			}.model()
			in := synthInputs(r, m, nil)
			in["x"].Float32s()[0], in["x"].Float32s()[d+1] = 0, float32(math.NaN())
			clear(in["x"].Float32s()[2*d : 3*d]) // a zero row: clamped to eps
			fused, unfused, _ := runAll(t, m, in)
			p, fs := fusedPlan(t, m, in, func(f Fusion) bool { return f.Node.OpType == ops.NormalizeL2Op })
			for _, o := range append([]string{"y"}, c.outputs...) {
				got, want := fused[o].Float32s(), unfused[o].Float32s()
				if len(got) != len(want) || len(got) == 0 {
					t.Fatalf("%s: fused %d values, unfused %d", o, len(got), len(want))
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
						t.Fatalf("%s[%d]: fused %v, unfused %v", o, i, got[i], want[i])
					}
				}
			}
			if c.fused == "" {
				if len(fs) != 0 {
					t.Fatalf("fused %s, want no NormalizeL2", fs[0].Describe())
				}
			} else {
				oneFusion(t, fs, c.fused)
				var absorbed []string
				for _, a := range fs[0].Absorbed {
					absorbed = append(absorbed, a.OpType)
				}
				if g := strings.Join(absorbed, " "); g != c.absorbed {
					t.Errorf("absorbed %q, want %q", g, c.absorbed)
				}
			}
			if g := stepOpTypes(t, p, in); g != c.steps {
				t.Errorf("steps %s, want %s", g, c.steps)
			}
		})
	}
}
