package graph

import (
	"context"
	"math"
	"math/rand"
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

// TestEncoderGeluFused: the bundled encoder's two GELU MLPs (F.gelu,
// exported as Erf) are fused.
func TestEncoderGeluFused(t *testing.T) {
	m, err := onnx.Load("../../models/s001_encoder_2x4/model.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := p.Fusions(map[string]*ir.Tensor{"x": ir.NewTensor(ir.Float, []int{2, 8, 32}), "mask": ir.NewTensor(ir.Bool, []int{2, 8})})
	if err != nil {
		t.Fatal(err)
	}
	var gelus []string
	for _, f := range fs {
		if f.Node.OpType == "Gelu" {
			gelus = append(gelus, f.Describe())
		}
	}
	if len(gelus) != 2 {
		t.Fatalf("%d Gelu fusions, want 2:\n%s", len(gelus), strings.Join(gelus, "\n"))
	}
}
