package graph

import (
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// TestFuseRMSNorm checks that the RMS norm chains of LLaMA-style exports
// become one RMSNormalization step with the chain's results, in each of
// their spellings, and that chains the rewrite must not touch stay as they
// are.
func TestFuseRMSNorm(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	axes := func(a ...int64) *ir.Attribute { return intsAttr("axes", a) }
	toFloat := &ir.Attribute{Name: "to", Type: ir.AttrInt, Int: int64(ir.Float)}
	toHalf := &ir.Attribute{Name: "to", Type: ir.AttrInt, Int: int64(ir.Float16)}
	// head squares x, averages, adds eps and takes the square root (s);
	// the tails divide x by s and scale, reading "s" and writing "y".
	head := func(sq *ir.Node, meanAxes *ir.Attribute, epsFirst bool) []*ir.Node {
		add := node("Add", []string{"v", "eps"}, []string{"ve"})
		if epsFirst {
			add = node("Add", []string{"eps", "v"}, []string{"ve"})
		}
		return []*ir.Node{sq, node("ReduceMean", []string{"x2"}, []string{"v"}, meanAxes), add, node("Sqrt", []string{"ve"}, []string{"s"})}
	}
	pow := node("Pow", []string{"x", "two"}, []string{"x2"})
	llama := []*ir.Node{ // x * rsqrt(...) exports as Div(1, Sqrt) then Mul; .to(dtype), weight * y
		node("Div", []string{"one", "s"}, []string{"r"}),
		node("Mul", []string{"x", "r"}, []string{"n"}),
		node("Cast", []string{"n"}, []string{"nc"}, toFloat),
		node("Mul", []string{"gamma", "nc"}, []string{"y"}),
	}
	chain := func(h []*ir.Node, tail ...*ir.Node) []*ir.Node { return append(append([]*ir.Node{}, h...), tail...) }
	llamaOps := "Pow ReduceMean Add Sqrt Div Mul Cast Mul"
	for _, c := range []struct {
		name  string
		nodes []*ir.Node
		outs  []string
		fused string // replaced op types, "" when nothing may fuse
	}{
		{"LlamaRMSNorm", chain(head(pow, axes(-1), false), llama...), nil, llamaOps},
		{"Mul(x, x), eps first, Reciprocal, r first, no Cast", chain(head(node("Mul", []string{"x", "x"}, []string{"x2"}), axes(3), true),
			node("Reciprocal", []string{"s"}, []string{"r"}),
			node("Mul", []string{"r", "x"}, []string{"n"}),
			node("Mul", []string{"n", "gamma"}, []string{"y"})), nil, "Mul ReduceMean Add Sqrt Reciprocal Mul Mul"},
		{"Div(x, s), two Casts", chain(head(pow, axes(-1), false),
			node("Div", []string{"x", "s"}, []string{"n"}),
			node("Cast", []string{"n"}, []string{"nc"}, toFloat),
			node("Cast", []string{"nc"}, []string{"nc2"}, toFloat),
			node("Mul", []string{"nc2", "gamma"}, []string{"y"})), nil, "Pow ReduceMean Add Sqrt Div Cast Cast Mul"},
		{"over two dims", chain(head(pow, axes(-2, -1), false),
			node("Div", []string{"x", "s"}, []string{"n"}),
			node("Mul", []string{"n", "gamma2"}, []string{"y"})), nil, "Pow ReduceMean Add Sqrt Div Mul"},
		{"x also an output", chain(head(pow, axes(-1), false), llama...), []string{"x2"}, ""},
		{"the mean of squares read elsewhere", chain(head(pow, axes(-1), false), llama...), []string{"v"}, ""},
		{"not the trailing axis", chain(head(pow, axes(2), false), llama...), nil, ""},
		{"cube, not square", chain(head(node("Pow", []string{"x", "three"}, []string{"x2"}), axes(-1), false), llama...), nil, ""},
		{"Div(2, s)", chain(head(pow, axes(-1), false),
			node("Div", []string{"two", "s"}, []string{"r"}),
			node("Mul", []string{"x", "r"}, []string{"n"}),
			node("Mul", []string{"gamma", "n"}, []string{"y"})), nil, ""},
		{"divides another tensor", chain(head(pow, axes(-1), false),
			node("Div", []string{"w", "s"}, []string{"n"}),
			node("Mul", []string{"n", "gamma"}, []string{"y"})), nil, ""},
		{"a Cast to float16 is not a no-op", chain(head(pow, axes(-1), false),
			node("Div", []string{"x", "s"}, []string{"n"}),
			node("Cast", []string{"n"}, []string{"nh"}, toHalf),
			node("Cast", []string{"nh"}, []string{"nc"}, toFloat),
			node("Mul", []string{"nc", "gamma"}, []string{"y"})), nil, ""},
		{"scale not a constant", chain(head(pow, axes(-1), false),
			node("Div", []string{"x", "s"}, []string{"n"}),
			node("Mul", []string{"n", "w"}, []string{"y"})), nil, ""},
		{"scale wider than the normalized dims", chain(head(pow, axes(-1), false),
			node("Div", []string{"x", "s"}, []string{"n"}),
			node("Mul", []string{"n", "gamma_wide"}, []string{"y"})), nil, ""},
		{"no scale", chain(head(pow, axes(-1), false),
			node("Div", []string{"x", "s"}, []string{"n"}),
			node("Identity", []string{"n"}, []string{"y"})), nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := synth{
				inputs: []*ir.ValueInfo{vi("x", ir.Float, 3, 5, 6, 16), vi("w", ir.Float, 3, 5, 6, 16)},
				inits: map[string]*ir.Tensor{"one": sc(1), "two": sc(2), "three": sc(3), "eps": sc(1e-6),
					"gamma": randT(r, 16), "gamma2": randT(r, 6, 16), "gamma_wide": randT(r, 5, 1, 16)},
				nodes:   c.nodes,
				outputs: append([]string{"y"}, c.outs...),
			}.model()
			in := map[string]*ir.Tensor{"x": randT(r, 3, 5, 6, 16), "w": randT(r, 3, 5, 6, 16)}
			fused, unfused, rms := runFusedOp(t, m, in, "RMSNormalization")
			if c.fused == "" {
				if len(rms) != 0 {
					t.Fatalf("fused %s, want no RMSNormalization", rms[0].Describe())
				}
			} else {
				oneFusion(t, rms, c.fused)
			}
			closeWithin(t, fused, unfused, 2e-5)
		})
	}
}

// TestLlamaRMSNormFused: both RMS norms of the bundled opset-17 LLaMA block
// are fused.
func TestLlamaRMSNormFused(t *testing.T) {
	m, err := onnx.Load("../../models/llama_attention_opset17/model.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*ir.Tensor{
		"x": ir.NewTensor(ir.Float, []int{1, 8, 64}), "position_ids": ir.NewTensor(ir.Int64, []int{1, 8}),
		"past_key": ir.NewTensor(ir.Float, []int{1, 2, 4, 16}), "past_value": ir.NewTensor(ir.Float, []int{1, 2, 4, 16}),
	}
	fs, err := p.Fusions(in)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fs {
		if f.Node.OpType == "RMSNormalization" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d RMSNormalization fusions, want 2", n)
	}
}
