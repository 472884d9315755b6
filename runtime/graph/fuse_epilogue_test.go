package graph

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// TestFuseEpilogues: a Linear layer's activation (Relu, Gelu, SiLU's
// Sigmoid and Mul), a gated MLP's Mul and a skip connection's Add fold
// into the FusedMatMul step, through one Reshape that keeps the last dim;
// everything else stays its own step. Fused and unfused plans agree bit
// for bit.
func TestFuseEpilogues(t *testing.T) {
	r := rand.New(rand.NewSource(31))
	const m, k, n = 6, 16, 8
	ints := func(v ...int64) *ir.Tensor { return ir.FromSlice([]int{len(v)}, v) }
	perm102 := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{1, 0, 2}}
	tanh := &ir.Attribute{Name: "approximate", Type: ir.AttrString, String: []byte("tanh")}
	for _, c := range []struct {
		name     string
		nodes    []*ir.Node
		inputs   []*ir.ValueInfo // besides x [m, k]
		outputs  []string        // default y
		replaced string          // the fusion's replaced ops
		act      string          // the fused node's activation
		residual string          // the fused node's residual input
		gate     string          // the fused node's gate input
	}{
		{"Relu", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Add", []string{"h", "b"}, []string{"hb"}), node("Relu", []string{"hb"}, []string{"y"})},
			nil, nil, "MatMul Add Relu", "Relu", "", ""},
		{"Gelu then residual", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Gelu", []string{"h"}, []string{"g"}), node("Add", []string{"res", "g"}, []string{"y"})},
			[]*ir.ValueInfo{vi("res", ir.Float, m, n)}, nil, "MatMul Gelu Add", "Gelu", "res", ""},
		{"residual after bias", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Add", []string{"b", "h"}, []string{"hb"}), node("Add", []string{"hb", "res"}, []string{"y"})},
			[]*ir.ValueInfo{vi("res", ir.Float, m, n)}, nil, "MatMul Add Add", "", "res", ""},
		{"Reshape then residual", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Reshape", []string{"h", "shape"}, []string{"h3"}), node("Add", []string{"h3", "res3"}, []string{"y"})},
			[]*ir.ValueInfo{vi("res3", ir.Float, 2, 3, n)}, nil, "MatMul Reshape Add", "", "res3", ""},
		{"Reshape, tanh Gelu, residual", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Reshape", []string{"h", "shape"}, []string{"h3"}), node("Gelu", []string{"h3"}, []string{"g"}, tanh), node("Add", []string{"g", "res3"}, []string{"y"})},
			[]*ir.ValueInfo{vi("res3", ir.Float, 2, 3, n)}, nil, "MatMul Reshape Gelu Add", "GeluTanh", "res3", ""},
		{"Relu, Reshape, residual", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Relu", []string{"h"}, []string{"a"}), node("Reshape", []string{"a", "shape"}, []string{"a3"}), node("Add", []string{"a3", "res3"}, []string{"y"})},
			[]*ir.ValueInfo{vi("res3", ir.Float, 2, 3, n)}, nil, "MatMul Relu Reshape Add", "Relu", "res3", ""},
		{"Reshape, size-1 Transpose, residual", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Reshape", []string{"h", "shape1"}, []string{"h3"}), node("Transpose", []string{"h3"}, []string{"t"}, perm102), node("Add", []string{"t", "res1"}, []string{"y"})},
			[]*ir.ValueInfo{vi("res1", ir.Float, 1, m, n)}, nil, "MatMul Reshape Transpose Add", "", "res1", ""},
		// Left alone: a Transpose that moves rows, an Add that broadcasts
		// (a bias, not a residual), an activation with no epilogue kernel,
		// a product read twice, a Reshape of the last dim.
		{"Transpose moving rows", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Reshape", []string{"h", "shape"}, []string{"h3"}), node("Transpose", []string{"h3"}, []string{"t"}, perm102), node("Add", []string{"t", "res3t"}, []string{"y"})},
			[]*ir.ValueInfo{vi("res3t", ir.Float, 3, 2, n)}, nil, "MatMul", "", "", ""},
		{"broadcast Add", []*ir.Node{node("MatMul", []string{"x", "xw"}, []string{"h"}), node("Add", []string{"h", "row"}, []string{"y"})},
			[]*ir.ValueInfo{vi("xw", ir.Float, k, n), vi("row", ir.Float, 1, n)}, nil, "", "", "", ""},
		{"Sigmoid", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Sigmoid", []string{"h"}, []string{"y"})},
			nil, nil, "MatMul", "", "", ""},
		{"product read twice", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Relu", []string{"h"}, []string{"y"})},
			nil, []string{"y", "h"}, "MatMul", "", "", ""},
		{"Reshape of the last dim", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Reshape", []string{"h", "shapeN"}, []string{"h3"}), node("Relu", []string{"h3"}, []string{"y"})},
			nil, nil, "MatMul", "", "", ""},
		// SiLU (x·σ(x)), the gate Mul, and LLaMA's SwiGLU MLP.
		{"SiLU", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Sigmoid", []string{"h"}, []string{"s"}), node("Mul", []string{"h", "s"}, []string{"y"})},
			nil, nil, "MatMul Sigmoid Mul", "Silu", "", ""},
		{"SiLU as σ·h, then gate", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Sigmoid", []string{"h"}, []string{"s"}), node("Mul", []string{"s", "h"}, []string{"a"}), node("Mul", []string{"g", "a"}, []string{"y"})},
			[]*ir.ValueInfo{vi("g", ir.Float, m, n)}, nil, "MatMul Sigmoid Mul Mul", "Silu", "", "g"},
		{"SwiGLU: w3 after w1, then residual", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Sigmoid", []string{"h"}, []string{"s"}), node("Mul", []string{"h", "s"}, []string{"a"}),
			node("MatMul", []string{"x", "w3"}, []string{"g"}), node("Mul", []string{"a", "g"}, []string{"p"}), node("Add", []string{"p", "res"}, []string{"y"})},
			[]*ir.ValueInfo{vi("res", ir.Float, m, n)}, nil, "MatMul Sigmoid Mul Mul Add", "Silu", "res", "g"},
		{"Gelu then gate", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Gelu", []string{"h"}, []string{"a"}), node("Mul", []string{"a", "g"}, []string{"y"})},
			[]*ir.ValueInfo{vi("g", ir.Float, m, n)}, nil, "MatMul Gelu Mul", "Gelu", "", "g"},
		{"gate alone", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Mul", []string{"h", "g"}, []string{"y"})},
			[]*ir.ValueInfo{vi("g", ir.Float, m, n)}, nil, "MatMul Mul", "", "", "g"},
		{"Reshape, SiLU, gate", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Reshape", []string{"h", "shape"}, []string{"h3"}), node("Sigmoid", []string{"h3"}, []string{"s"}), node("Mul", []string{"h3", "s"}, []string{"a"}), node("Mul", []string{"a", "g3"}, []string{"y"})},
			[]*ir.ValueInfo{vi("g3", ir.Float, 2, 3, n)}, nil, "MatMul Reshape Sigmoid Mul Mul", "Silu", "", "g3"},
		// Left alone: σ read elsewhere too, or a graph output; h squared; a
		// gate that broadcasts; the SiLU's own square.
		{"σ read elsewhere", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Sigmoid", []string{"h"}, []string{"s"}), node("Mul", []string{"h", "s"}, []string{"a"}), node("Add", []string{"a", "s"}, []string{"y"})},
			nil, nil, "MatMul", "", "", ""},
		{"σ a graph output", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Sigmoid", []string{"h"}, []string{"s"}), node("Mul", []string{"h", "s"}, []string{"y"})},
			nil, []string{"y", "s"}, "MatMul", "", "", ""},
		{"h squared", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Mul", []string{"h", "h"}, []string{"y"})},
			nil, nil, "MatMul", "", "", ""},
		{"Mul of h by another sigmoid", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Sigmoid", []string{"h"}, []string{"s"}), node("Sigmoid", []string{"g"}, []string{"sg"}), node("Mul", []string{"h", "sg"}, []string{"a"}), node("Add", []string{"a", "s"}, []string{"y"})},
			[]*ir.ValueInfo{vi("g", ir.Float, m, n)}, nil, "MatMul", "", "", ""},
		{"gate broadcasting", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Sigmoid", []string{"h"}, []string{"s"}), node("Mul", []string{"h", "s"}, []string{"a"}), node("Mul", []string{"a", "row"}, []string{"y"})},
			[]*ir.ValueInfo{vi("row", ir.Float, 1, n)}, nil, "MatMul Sigmoid Mul", "Silu", "", ""},
		{"gate that widens", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Mul", []string{"h", "g3"}, []string{"y"})},
			[]*ir.ValueInfo{vi("g3", ir.Float, 2, m, n)}, nil, "MatMul", "", "", ""},
		{"SiLU squared", []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"h"}), node("Sigmoid", []string{"h"}, []string{"s"}), node("Mul", []string{"h", "s"}, []string{"a"}), node("Mul", []string{"a", "a"}, []string{"y"})},
			nil, nil, "MatMul Sigmoid Mul", "Silu", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, ok := ops.FusedMatMulActivation(&ir.Node{OpType: "Gelu", Attrs: []*ir.Attribute{tanh}}); strings.Contains(c.name, "tanh") && !ok {
				t.Skip("no AVX-512: the tanh Gelu runs as its own step")
			}
			s := synth{inputs: append([]*ir.ValueInfo{vi("x", ir.Float, m, k)}, c.inputs...), nodes: c.nodes, outputs: c.outputs,
				inits: map[string]*ir.Tensor{"w": randT(r, k, n), "b": randT(r, n), "shape": ints(2, 3, n), "shape1": ints(m, 1, n), "shapeN": ints(m, 2, n/2), "w3": randT(r, k, n)}}
			if s.outputs == nil {
				s.outputs = []string{"y"}
			}
			in := map[string]*ir.Tensor{"x": randT(r, m, k)}
			for _, v := range c.inputs {
				dims, _ := v.Type.Shape.Concrete()
				in[v.Name] = randT(r, dims...)
			}
			model := s.model()
			model.Opsets[""] = 20 // Gelu
			fused, unfused, fs := runFusedOp(t, model, in, ops.FusedMatMulOp)
			sameOutputs(t, fused, unfused)
			for i, u := range unfused.Float32s() {
				if g := fused.Float32s()[i]; math.Float32bits(g) != math.Float32bits(u) {
					t.Fatalf("element %d: fused %g, unfused %g: not bit for bit", i, g, u)
				}
			}
			if c.replaced == "" {
				if len(fs) != 0 {
					t.Fatalf("fusions %v, want none", fs)
				}
				return
			}
			// The fusion of the first MatMul, h (the SwiGLU's w3 is
			// another).
			fs = slices.DeleteFunc(fs, func(fu Fusion) bool { return fu.Replaced[0].Outputs[0] != "h" })
			fn := oneFusion(t, fs, c.replaced)
			act, _ := fn.AttrString("activation", "")
			input := func(k int) string {
				if len(fn.Inputs) > k {
					return fn.Inputs[k]
				}
				return ""
			}
			if res, gate := input(3), input(4); act != c.act || res != c.residual || gate != c.gate {
				t.Errorf("fused %s: activation %q, residual %q, gate %q; want %q, %q, %q", fn.Label(), act, res, gate, c.act, c.residual, c.gate)
			}
		})
	}
}
