package gpu

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/graph"
)

// leftPaddedLlama is transformers' LLaMA mask on [2, 6, 8] operands: a
// finfo.min causal constant with the padded keys masked_fill'ed with
// finfo.min (Where(pad, finfo.min, causal)), added to the scaled scores.
func leftPaddedLlama() *ir.Model {
	const s, d = 6, 8
	fmin := float32(-math.MaxFloat32)
	typ := ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Value: 2}, {Value: s}, {Value: d}}}
	causal := ir.NewTensor(ir.Float, []int{s, s})
	for i := 0; i < s; i++ {
		for j := i + 1; j < s; j++ {
			causal.Float32s()[i*s+j] = fmin
		}
	}
	return &ir.Model{
		IRVersion: 8, Opsets: map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name: "llama_padded",
			Inputs: []*ir.ValueInfo{{Name: "q", Type: typ}, {Name: "k", Type: typ}, {Name: "v", Type: typ},
				{Name: "pad", Type: ir.TypeInfo{DType: ir.Bool, RankKnown: true, Shape: ir.Shape{{Value: 2}, {Value: 1}, {Value: s}}}}},
			Outputs: []*ir.ValueInfo{{Name: "y", Type: typ}},
			Nodes: []*ir.Node{
				{Name: "kt", OpType: "Transpose", Inputs: []string{"k"}, Outputs: []string{"kt"}, Attrs: []*ir.Attribute{{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 2, 1}}}},
				{Name: "s", OpType: "MatMul", Inputs: []string{"q", "kt"}, Outputs: []string{"s"}},
				{Name: "sc", OpType: "Div", Inputs: []string{"s", "c"}, Outputs: []string{"sc"}},
				{Name: "m", OpType: "Where", Inputs: []string{"pad", "fmin", "causal"}, Outputs: []string{"m"}},
				{Name: "sm", OpType: "Add", Inputs: []string{"sc", "m"}, Outputs: []string{"sm"}},
				{Name: "p", OpType: "Softmax", Inputs: []string{"sm"}, Outputs: []string{"p"}, Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: -1}}},
				{Name: "y", OpType: "MatMul", Inputs: []string{"p", "v"}, Outputs: []string{"y"}},
			},
			Initializers:     map[string]*ir.Tensor{"c": ir.Scalar(float32(math.Sqrt(d))), "fmin": ir.Scalar(fmin), "causal": causal},
			InitializerOrder: []string{"c", "fmin", "causal"},
		},
	}
}

// TestUniformRowsFallback checks that a fused node with
// masked_rows_uniform (the CPU program's fusion of a left-padded LLaMA
// mask) runs as the original nodes on the GPU backend, whose attention
// kernel would give NaN for the rows that see only padding, and matches
// the CPU program (finite: those rows are the mean of V).
func TestUniformRowsFallback(t *testing.T) {
	m := leftPaddedLlama()
	prog, err := graph.Compile(m, graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*ir.Tensor{"pad": ir.FromSlice([]int{2, 1, 6}, []bool{false, false, false, false, false, false, true, true, true, false, false, false})}
	for k, name := range []string{"q", "k", "v"} {
		x := ir.NewTensor(ir.Float, []int{2, 6, 8})
		for i := range x.Float32s() {
			x.Float32s()[i] = float32(math.Sin(float64(i*(k+3)))) / 4
		}
		in[name] = x
	}
	fs, err := prog.Fusions(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) == 0 || fs[0].Node.OpType != "FusedAttention" {
		t.Fatalf("fusions %v: the CPU program does not fuse the chain", fs)
	}
	if u, _ := fs[0].Node.AttrInt("masked_rows_uniform", 0); u != 1 {
		t.Fatalf("the fused node has no masked_rows_uniform: %v", fs[0].Node.Attrs)
	}
	want, err := prog.Run(context.Background(), in, graph.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range want["y"].Float32s() {
		if math.IsNaN(float64(x)) {
			t.Fatalf("CPU y[%d] is NaN", i)
		}
	}
	s, _, id := compileOnEmu(t, m, false)
	kernels := runLikeCPU(t, s, id, in, want["y"])
	if strings.Contains(strings.Join(kernels, " "), "attention_f32") {
		t.Errorf("kernels %v: the attention kernel ran a masked_rows_uniform node", kernels)
	}
}
