package graph

import (
	"context"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// TestFuseGelu checks that each spelling of the exported exact GELU
// becomes one Gelu step with the chain's results, and that chains the
// rewrite must not touch (an intermediate read elsewhere, a wrong
// constant, the tanh form's pieces) stay as they are.
func TestFuseGelu(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	x := randT(r, 3, 7, 33)
	for i := range x.Float32s() {
		x.Float32s()[i] *= 3 // reach the tail where Erf saturates
	}
	in := map[string]*ir.Tensor{"x": x}
	sqrt2, invSqrt2 := sc(float32(math.Sqrt2)), sc(float32(1/math.Sqrt2))
	chain := func(z *ir.Node, rest ...*ir.Node) []*ir.Node {
		return append([]*ir.Node{z, node("Erf", []string{"z"}, []string{"e"})}, rest...)
	}
	div := func() *ir.Node { return node("Div", []string{"x", "sqrt2"}, []string{"z"}) }
	torchForm := func() []*ir.Node { // torch.onnx's symbolic: (x·(erf+1))·0.5
		return []*ir.Node{
			node("Add", []string{"e", "one"}, []string{"h"}),
			node("Mul", []string{"x", "h"}, []string{"xh"}),
			node("Mul", []string{"xh", "half"}, []string{"y"}),
		}
	}
	for _, c := range []struct {
		name  string
		nodes []*ir.Node
		outs  []string
		fused string // replaced op types, "" when nothing may fuse
	}{
		{"torch symbolic", chain(div(), torchForm()...), nil, "Div Erf Add Mul Mul"},
		{"x*0.5*(1+erf(x/sqrt2))", chain(div(),
			node("Mul", []string{"x", "half"}, []string{"xs"}),
			node("Add", []string{"one", "e"}, []string{"h"}),
			node("Mul", []string{"xs", "h"}, []string{"y"})), nil, "Div Erf Mul Add Mul"},
		{"0.5*(1+erf)*x, Mul by 1/sqrt2", chain(node("Mul", []string{"invsqrt2", "x"}, []string{"z"}),
			node("Add", []string{"e", "one"}, []string{"h"}),
			node("Mul", []string{"half", "h"}, []string{"hh"}),
			node("Mul", []string{"hh", "x"}, []string{"y"})), nil, "Mul Erf Add Mul Mul"},
		{"erf also an output", chain(div(), torchForm()...), []string{"e"}, ""},
		{"scale 2 is not sqrt2", chain(node("Div", []string{"x", "two"}, []string{"z"}), torchForm()...), nil, ""},
		{"Sub, not Add", chain(div(),
			node("Sub", []string{"e", "one"}, []string{"h"}),
			node("Mul", []string{"x", "h"}, []string{"xh"}),
			node("Mul", []string{"xh", "half"}, []string{"y"})), nil, ""},
		{"times another tensor", chain(div(),
			node("Add", []string{"e", "one"}, []string{"h"}),
			node("Mul", []string{"w", "h"}, []string{"xh"}),
			node("Mul", []string{"xh", "half"}, []string{"y"})), nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := synth{
				inputs: []*ir.ValueInfo{vi("x", ir.Float, 3, 7, 33)},
				inits: map[string]*ir.Tensor{"sqrt2": sqrt2, "invsqrt2": invSqrt2, "one": sc(1), "half": sc(0.5), "two": sc(2),
					"w": randT(r, 3, 7, 33)},
				nodes:   c.nodes,
				outputs: append([]string{"y"}, c.outs...),
			}.model()
			fused, unfused, fs := runFusedOp(t, m, in, "Gelu")
			if c.fused == "" {
				if len(fs) != 0 {
					t.Fatalf("fused %s, want no Gelu", fs[0].Describe())
				}
			} else {
				oneFusion(t, fs, c.fused)
			}
			// The chain in float32 loses 1 + erf's precision for negative x:
			// compare with an absolute tolerance of a few ulp of 1 times x.
			for i, w := range unfused.Float32s() {
				g, xi := fused.Float32s()[i], float64(x.Float32s()[i])
				if math.Abs(float64(g-w)) > 1e-6*math.Max(1, math.Abs(xi)) || math.IsNaN(float64(g)) != math.IsNaN(float64(w)) {
					t.Fatalf("gelu(%v): fused %v, unfused %v", xi, g, w)
				}
				if c.fused != "" {
					if exact := geluRef(xi); math.Abs(float64(g)-exact) > 1e-6*math.Abs(exact)+1e-30 && xi > -5.5 {
						t.Fatalf("gelu(%v): fused %v, exact %v", xi, g, exact)
					}
				}
			}
		})
	}
}

// geluRef is the exact GELU in float64.
func geluRef(x float64) float64 { return 0.5 * x * math.Erfc(-x/math.Sqrt2) }

// runFusedOp runs a model fused and unfused and returns output y of both
// and the fused plan's fusions into op type op (Gelu, LayerNormalization).
func runFusedOp(t *testing.T, m *ir.Model, in map[string]*ir.Tensor, op string) (fused, unfused *ir.Tensor, fs []Fusion) {
	t.Helper()
	var outs [2]*ir.Tensor
	for k, noFuse := range []bool{false, true} {
		p, err := Compile(m, Options{Threads: 2, NoFuse: noFuse})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Run(context.Background(), in, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		outs[k] = res["y"]
		if !noFuse {
			all, err := p.Fusions(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range all {
				if f.Node.OpType == op {
					fs = append(fs, f)
				}
			}
		}
	}
	return outs[0], outs[1], fs
}

// TestModelGelusFused: the bundled encoder's two GELU MLPs (F.gelu,
// exported as Erf) and GPT-2's gelu_new (Pow and Tanh) are fused, each
// into one Gelu of its approximation, which the GEMM before it may then
// take into its epilogue; with NoFuse nothing is.
func TestModelGelusFused(t *testing.T) {
	for _, c := range []struct {
		model, approximate, replaced string
		count                        int
	}{
		{"s001_encoder_2x4", "none", "Div Erf Add Mul Mul", 2},
		{"gpt2_block", "tanh", "Mul Pow Mul Add Mul Tanh Add Mul", 1},
	} {
		t.Run(c.model, func(t *testing.T) {
			m, err := onnx.Load("../../models/"+c.model+"/model.onnx", onnx.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := Compile(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			fs, err := p.Fusions(zeroInputs(t, m.Graph, modelDims))
			if err != nil {
				t.Fatal(err)
			}
			var gelus []string
			for _, f := range fs {
				// A Gelu step, or a GEMM that took it into its epilogue
				// (fuse_epilogue.go): then its nodes are among the GEMM's.
				a, _ := f.Node.AttrString("approximate", "none")
				switch act, _ := f.Node.AttrString("activation", ""); {
				case f.Node.OpType == "Gelu":
				case act == "Gelu":
					a = "none"
				case act == "GeluTanh":
					a = "tanh"
				default:
					continue
				}
				gelus = append(gelus, f.Describe())
				if a != c.approximate {
					t.Errorf("%s: approximate %q, want %q", f.Describe(), a, c.approximate)
				}
				var ops []string
				for _, n := range f.Replaced {
					ops = append(ops, n.OpType)
				}
				if g := strings.Join(ops, " "); g != c.replaced && !strings.Contains(" "+g+" ", " "+c.replaced+" ") {
					t.Errorf("%s: replaced %s, want %s among them", f.Describe(), g, c.replaced)
				}
			}
			if len(gelus) != c.count {
				t.Fatalf("%d Gelu fusions, want %d:\n%s", len(gelus), c.count, strings.Join(gelus, "\n"))
			}
			p, err = Compile(m, Options{Threads: 2, NoFuse: true})
			if err != nil {
				t.Fatal(err)
			}
			if fs, err := p.Fusions(zeroInputs(t, m.Graph, modelDims)); err != nil || len(fs) != 0 {
				t.Fatalf("NoFuse: %d fusions (%v), want none", len(fs), err)
			}
		})
	}
}

// TestFuseGeluTanh checks that the spellings of the tanh GELU (GPT-2's
// gelu_new as torch 1.13 exports it, x·x·x for the cube, FastGELU's
// factored argument, other associations and operand orders) become one
// Gelu step with approximate "tanh", and that chains the rewrite must not
// touch stay as they are. Over 2^16 values from -12 to 12 the fused step
// stays within 3e-7·max(1, |x|) of the float32 chain and of the float64
// formula (measured: 1.9e-7 and 1.0e-7) (both compute 1 + tanh in float32, so for negative x the
// absolute error scales with |x|).
func TestFuseGeluTanh(t *testing.T) {
	const rows, cols = 64, 1024
	x := ir.NewTensor(ir.Float, []int{rows, cols})
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(-12 + 24*float64(i)/float64(rows*cols-1))
	}
	in := map[string]*ir.Tensor{"x": x}
	half4 := ir.NewTensor(ir.Float, []int{1, 1, 1})
	half4.Float32s()[0] = 0.5
	inits := map[string]*ir.Tensor{
		"c": sc(float32(math.Sqrt(2 / math.Pi))), "cfast": sc(0.7978845608), "invc": sc(float32(1 / math.Sqrt(2/math.Pi))),
		"k": sc(0.044715), "negk": sc(-0.044715), "one": sc(1), "half": sc(0.5), "three": sc(3), "three64": ir.Scalar(int64(3)), "two": sc(2),
		"wrongk": sc(0.044), "wronghalf": sc(0.6), "half4": half4, "w": randT(rand.New(rand.NewSource(6)), rows, cols),
	}
	// gelu_new as torch 1.13 exports it, with the given constants k and
	// half and the cube's Pow exponent.
	newGelu := func(k, half, exp string) []*ir.Node {
		return nodes("hx = Mul x " + half + "; x3 = Pow x " + exp + "; kx3 = Mul x3 " + k +
			"; in = Add x kx3; arg = Mul in c; t = Tanh arg; h = Add t one; y = Mul hx h")
	}
	for _, c := range []struct {
		name  string
		nodes []*ir.Node
		outs  []string
		fused string // replaced op types, "" when nothing may fuse
	}{
		{"gelu_new as torch 1.13 exports it", newGelu("k", "half", "three"), nil, "Mul Pow Mul Add Mul Tanh Add Mul"},
		{"x*x*x, operands swapped", nodes("xx = Mul x x; x3 = Mul x xx; kx3 = Mul k x3; in = Add kx3 x; arg = Mul c in; " +
			"t = Tanh arg; h = Add one t; hx = Mul half x; y = Mul h hx"), nil, "Mul Mul Mul Add Mul Tanh Add Mul Mul"},
		{"FastGELU: x*c*(1 + k*x*x)", nodes("xc = Mul x cfast; kx = Mul k x; kxx = Mul kx x; p = Add one kxx; arg = Mul xc p; " +
			"t = Tanh arg; h = Add one t; hx = Mul half x; y = Mul hx h"), nil, "Mul Mul Mul Add Mul Tanh Add Mul Mul"},
		{"(x*(1+t))*0.5, int64 exponent", nodes("x3 = Pow x three64; kx3 = Mul x3 k; in = Add x kx3; arg = Mul in c; " +
			"t = Tanh arg; h = Add t one; xh = Mul x h; y = Mul xh half"), nil, "Pow Mul Add Mul Tanh Add Mul Mul"},
		{"x - (-k)*x³", nodes("hx = Mul x half; x3 = Pow x three; kx3 = Mul x3 negk; in = Sub x kx3; arg = Mul in c; " +
			"t = Tanh arg; h = Add t one; y = Mul hx h"), nil, "Mul Pow Mul Sub Mul Tanh Add Mul"},
		{"x*(0.5 + 0.5*t), Div by 1/c", nodes("x3 = Pow x three; kx3 = Mul x3 k; in = Add kx3 x; arg = Div in invc; " +
			"t = Tanh arg; ht = Mul t half; h = Add half ht; y = Mul x h"), nil, "Pow Mul Add Div Tanh Mul Add Mul"},
		{"0.044 is not 0.044715", newGelu("wrongk", "half", "three"), nil, ""},
		{"0.6 is not 0.5", newGelu("k", "wronghalf", "three"), nil, ""},
		{"Pow(x, 2) is not the cube", newGelu("k", "half", "two"), nil, ""},
		{"tanh also an output", newGelu("k", "half", "three"), []string{"t"}, ""},
		{"x³ read elsewhere", append(newGelu("k", "half", "three"), nodes("z = Add x3 x")...), []string{"z"}, ""},
		{"0.5 of shape [1, 1, 1] broadcasts wider", newGelu("k", "half4", "three"), nil, ""},
		{"times another tensor", nodes("hx = Mul w half; x3 = Pow x three; kx3 = Mul x3 k; in = Add x kx3; arg = Mul in c; " +
			"t = Tanh arg; h = Add t one; y = Mul hx h"), nil, ""},
		{"another tensor in the argument", nodes("hx = Mul x half; x3 = Pow x three; kx3 = Mul x3 k; in = Add w kx3; arg = Mul in c; " +
			"t = Tanh arg; h = Add t one; y = Mul hx h"), nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := synth{inputs: []*ir.ValueInfo{vi("x", ir.Float, rows, cols)}, inits: inits, nodes: c.nodes,
				outputs: append([]string{"y"}, c.outs...)}.model()
			fused, unfused, fs := runFusedOp(t, m, in, "Gelu")
			if c.fused == "" {
				if len(fs) != 0 {
					t.Fatalf("fused %s, want no Gelu", fs[0].Describe())
				}
				if !slices.Equal(fused.Float32s(), unfused.Float32s()) {
					t.Fatal("the unfused chain's outputs differ between the plans")
				}
				return
			}
			g := oneFusion(t, fs, c.fused)
			if a, _ := g.AttrString("approximate", "none"); a != "tanh" {
				t.Fatalf("approximate %q, want tanh", a)
			}
			var vsChain, vsExact float64 // in units of max(1, |x|)
			for i, w := range unfused.Float32s() {
				f, xi := float64(fused.Float32s()[i]), float64(x.Float32s()[i])
				scale := math.Max(1, math.Abs(xi))
				vsChain = math.Max(vsChain, math.Abs(f-float64(w))/scale)
				vsExact = math.Max(vsExact, math.Abs(f-geluTanhRef(xi))/scale)
				if math.IsNaN(f) {
					t.Fatalf("gelu(%v) = NaN", xi)
				}
			}
			t.Logf("max |fused - chain| %.2g, max |fused - float64| %.2g (times max(1, |x|))", vsChain, vsExact)
			if vsChain > 3e-7 || vsExact > 3e-7 {
				t.Errorf("fused Gelu off by %.2g from the chain, %.2g from the float64 formula, want within 3e-7·max(1, |x|)", vsChain, vsExact)
			}
		})
	}
}

// nodes builds nodes from "out = Op in...; ..." statements.
func nodes(src string) []*ir.Node {
	var ns []*ir.Node
	for _, st := range strings.Split(src, ";") {
		out, rhs, _ := strings.Cut(st, "=")
		f := strings.Fields(rhs)
		ns = append(ns, node(f[0], f[1:], []string{strings.TrimSpace(out)}))
	}
	return ns
}

// geluTanhRef is the tanh GELU in float64.
func geluTanhRef(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}
