package graph

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// TestFuseLayerNorm checks that the layer norm chains of opset < 17
// exports become one LayerNormalization step with the chain's results, and
// that chains the rewrite must not touch stay as they are.
func TestFuseLayerNorm(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	x := randT(r, 3, 5, 6, 16)
	for i := range x.Float32s() {
		x.Float32s()[i] = x.Float32s()[i]*4 + 3 // a mean far from 0
	}
	in := map[string]*ir.Tensor{"x": x}
	axes := func(a ...int64) *ir.Attribute { return intsAttr("axes", a) }
	// chain builds the exported chain; sq is the squaring node, tail the
	// nodes after Div (reading "n").
	chain := func(meanAxes, varAxes *ir.Attribute, sq *ir.Node, epsFirst bool, tail ...*ir.Node) []*ir.Node {
		add := node("Add", []string{"v", "eps"}, []string{"ve"})
		if epsFirst {
			add = node("Add", []string{"eps", "v"}, []string{"ve"})
		}
		return append([]*ir.Node{
			node("ReduceMean", []string{"x"}, []string{"m"}, meanAxes),
			node("Sub", []string{"x", "m"}, []string{"d"}),
			sq,
			node("ReduceMean", []string{"d2"}, []string{"v"}, varAxes),
			add,
			node("Sqrt", []string{"ve"}, []string{"s"}),
			node("Div", []string{"d", "s"}, []string{"n"}),
		}, tail...)
	}
	pow := func() *ir.Node { return node("Pow", []string{"d", "two"}, []string{"d2"}) }
	affine := func(scale, bias string) []*ir.Node {
		return []*ir.Node{
			node("Mul", []string{"n", scale}, []string{"ns"}),
			node("Add", []string{"ns", bias}, []string{"y"}),
		}
	}
	torchOps := "ReduceMean Sub Pow ReduceMean Add Sqrt Div Mul Add"
	for _, c := range []struct {
		name  string
		nodes []*ir.Node
		outs  []string
		fused string // replaced op types, "" when nothing may fuse
	}{
		{"torch symbolic", chain(axes(-1), axes(-1), pow(), false, affine("gamma", "beta")...), nil, torchOps},
		{"positive axes, eps first, scale first", chain(axes(3), axes(3), pow(), true,
			node("Mul", []string{"gamma", "n"}, []string{"ns"}),
			node("Add", []string{"beta", "ns"}, []string{"y"})), nil, torchOps},
		{"Mul(d, d), no bias", chain(axes(-1), axes(-1), node("Mul", []string{"d", "d"}, []string{"d2"}), false,
			node("Mul", []string{"n", "gamma"}, []string{"y"})), nil, "ReduceMean Sub Mul ReduceMean Add Sqrt Div Mul"},
		{"normalized_shape of two dims", chain(axes(-2, -1), axes(-1, -2), pow(), false, affine("gamma2", "beta2")...), nil, torchOps},
		{"bias also read elsewhere keeps the Add out", chain(axes(-1), axes(-1), pow(), false, affine("gamma", "beta")...), []string{"ns"},
			"ReduceMean Sub Pow ReduceMean Add Sqrt Div Mul"},
		{"mean also an output", chain(axes(-1), axes(-1), pow(), false, affine("gamma", "beta")...), []string{"m"}, ""},
		{"d read by a third node", chain(axes(-1), axes(-1), pow(), false,
			node("Mul", []string{"n", "gamma"}, []string{"ns"}),
			node("Add", []string{"ns", "d"}, []string{"y"})), nil, ""},
		{"not the trailing axis", chain(axes(2), axes(2), pow(), false, affine("gamma", "beta")...), nil, ""},
		{"different axes", chain(axes(-1), axes(-2, -1), pow(), false, affine("gamma", "beta")...), nil, ""},
		{"cube, not square", chain(axes(-1), axes(-1), node("Pow", []string{"d", "three"}, []string{"d2"}), false,
			affine("gamma", "beta")...), nil, ""},
		{"scale not a constant", chain(axes(-1), axes(-1), pow(), false, affine("w", "beta")...), nil, ""},
		{"scale wider than the normalized dims", chain(axes(-1), axes(-1), pow(), false, affine("gamma_wide", "beta")...), nil, ""},
		{"no scale", chain(axes(-1), axes(-1), pow(), false, node("Identity", []string{"n"}, []string{"y"})), nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := synth{
				inputs: []*ir.ValueInfo{vi("x", ir.Float, 3, 5, 6, 16), vi("w", ir.Float, 16)},
				inits: map[string]*ir.Tensor{"two": sc(2), "three": sc(3), "eps": sc(1e-5),
					"gamma": randT(r, 16), "beta": randT(r, 16), "gamma2": randT(r, 6, 16), "beta2": randT(r, 1, 16),
					"gamma_wide": randT(r, 5, 1, 16)},
				nodes:   c.nodes,
				outputs: append([]string{"y"}, c.outs...),
			}.model()
			in := map[string]*ir.Tensor{"x": in["x"], "w": randT(r, 16)}
			fused, unfused, lns := runFusedOp(t, m, in, "LayerNormalization")
			if c.fused == "" {
				if len(lns) != 0 {
					t.Fatalf("fused %s, want no LayerNormalization", lns[0].Describe())
				}
			} else {
				oneFusion(t, lns, c.fused)
			}
			closeWithin(t, fused, unfused, 2e-5)
		})
	}
}

// TestOpset14EncoderLayerNormFused: the bundled opset-14 encoder's four
// layer norms (exported as ReduceMean chains) are fused.
func TestOpset14EncoderLayerNormFused(t *testing.T) {
	m, err := onnx.Load("../../models/s001_encoder_2x4_opset14/model.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Opsets[""] != 14 {
		t.Fatalf("opset %d, want 14", m.Opsets[""])
	}
	p, err := Compile(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := p.Fusions(map[string]*ir.Tensor{"x": ir.NewTensor(ir.Float, []int{2, 8, 32}), "mask": ir.NewTensor(ir.Bool, []int{2, 8})})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fs {
		if f.Node.OpType == "LayerNormalization" {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d LayerNormalization fusions, want 4", n)
	}
}

// closeWithin fails unless fused and unfused have as many values and each
// fused one is within tol of the unfused, relative to max(1, |unfused|).
func closeWithin(t *testing.T, fused, unfused *ir.Tensor, tol float64) {
	t.Helper()
	if len(fused.Float32s()) != len(unfused.Float32s()) {
		t.Fatalf("fused %d values, unfused %d", len(fused.Float32s()), len(unfused.Float32s()))
	}
	for i, w := range unfused.Float32s() {
		g := fused.Float32s()[i]
		if math.Abs(float64(g-w)) > tol*math.Max(1, math.Abs(float64(w))) {
			t.Fatalf("y[%d]: fused %v, unfused %v", i, g, w)
		}
	}
}
