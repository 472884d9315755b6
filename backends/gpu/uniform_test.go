package gpu

import (
	"context"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/graph"
)

// chainModel is an attention chain on [2, 6, 8] operands q, k, v and the
// mask input pad (of type padType): scores q·kᵀ/√8, then maskNodes
// (reading "sc" and "pad", writing "sm"), softmax, · v; inits holds the
// masks' constants ("c", the √8, is added).
func chainModel(name string, padType ir.TypeInfo, maskNodes []*ir.Node, inits map[string]*ir.Tensor) *ir.Model {
	const s, d = 6, 8
	typ := ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Value: 2}, {Value: s}, {Value: d}}}
	inits["c"] = ir.Scalar(float32(math.Sqrt(d)))
	var order []string
	for n := range inits {
		order = append(order, n)
	}
	sort.Strings(order)
	nodes := []*ir.Node{
		{Name: "kt", OpType: "Transpose", Inputs: []string{"k"}, Outputs: []string{"kt"}, Attrs: []*ir.Attribute{{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 2, 1}}}},
		{Name: "s", OpType: "MatMul", Inputs: []string{"q", "kt"}, Outputs: []string{"s"}},
		{Name: "sc", OpType: "Div", Inputs: []string{"s", "c"}, Outputs: []string{"sc"}},
	}
	nodes = append(nodes, maskNodes...)
	nodes = append(nodes,
		&ir.Node{Name: "p", OpType: "Softmax", Inputs: []string{"sm"}, Outputs: []string{"p"}, Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: -1}}},
		&ir.Node{Name: "y", OpType: "MatMul", Inputs: []string{"p", "v"}, Outputs: []string{"y"}})
	return &ir.Model{
		IRVersion: 8, Opsets: map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name:             name,
			Inputs:           []*ir.ValueInfo{{Name: "q", Type: typ}, {Name: "k", Type: typ}, {Name: "v", Type: typ}, {Name: "pad", Type: padType}},
			Outputs:          []*ir.ValueInfo{{Name: "y", Type: typ}},
			Nodes:            nodes,
			Initializers:     inits,
			InitializerOrder: order,
		},
	}
}

// leftPaddedLlama is transformers' LLaMA mask: a finfo.min causal constant
// with the padded keys masked_fill'ed with finfo.min (Where(pad,
// finfo.min, causal)), added to the scaled scores.
func leftPaddedLlama() *ir.Model {
	const s = 6
	fmin := float32(-math.MaxFloat32)
	causal := ir.NewTensor(ir.Float, []int{s, s})
	for i := 0; i < s; i++ {
		for j := i + 1; j < s; j++ {
			causal.Float32s()[i*s+j] = fmin
		}
	}
	return chainModel("llama_padded", ir.TypeInfo{DType: ir.Bool, RankKnown: true, Shape: ir.Shape{{Value: 2}, {Value: 1}, {Value: s}}},
		[]*ir.Node{
			{Name: "m", OpType: "Where", Inputs: []string{"pad", "fmin", "causal"}, Outputs: []string{"m"}},
			{Name: "sm", OpType: "Add", Inputs: []string{"sc", "m"}, Outputs: []string{"sm"}},
		}, map[string]*ir.Tensor{"fmin": ir.Scalar(fmin), "causal": causal})
}

// TestUniformRowsFallback checks that a fused node with
// masked_rows_uniform (the CPU program's fusion of a left-padded LLaMA
// mask) runs as the original nodes on the GPU backend, whose attention
// kernel would give NaN for the rows that see only padding, and matches
// the CPU program (finite: those rows are the mean of V).
func TestUniformRowsFallback(t *testing.T) {
	m := leftPaddedLlama()
	in, fused, want := cpuFusion(t, m, ir.FromSlice([]int{2, 1, 6}, []bool{false, false, false, false, false, false, true, true, true, false, false, false}))
	if u, _ := fused.AttrInt("masked_rows_uniform", 0); u != 1 {
		t.Fatalf("the fused node has no masked_rows_uniform: %v", fused.Attrs)
	}
	for i, x := range want.Float32s() {
		if math.IsNaN(float64(x)) {
			t.Fatalf("CPU y[%d] is NaN", i)
		}
	}
	s, _, id := compileOnEmu(t, m, false)
	kernels := runLikeCPU(t, s, id, in, want)
	if strings.Contains(strings.Join(kernels, " "), "attention_f32") {
		t.Errorf("kernels %v: the attention kernel ran a masked_rows_uniform node", kernels)
	}
}

// cpuFusion runs chain model m (chainModel) on the CPU program with the
// mask input pad and q, k, v of sines, and returns the inputs, the
// program's fused attention node and its output.
func cpuFusion(t *testing.T, m *ir.Model, pad *ir.Tensor) (map[string]*ir.Tensor, *ir.Node, *ir.Tensor) {
	t.Helper()
	prog, err := graph.Compile(m, graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*ir.Tensor{"pad": pad}
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
	want, err := prog.Run(context.Background(), in, graph.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return in, fs[0].Node, want["y"]
}

// gpt2Causal is GPT-2's original attention chain: Where(causal constant,
// scores, -1e4), then + an additive key mask (the padding as 0 / -1e4).
func gpt2Causal() *ir.Model {
	const s = 6
	keep := ir.NewTensor(ir.Bool, []int{s, s})
	for i := 0; i < s; i++ {
		for j := 0; j <= i; j++ {
			keep.Bools()[i*s+j] = true
		}
	}
	return chainModel("gpt2_causal", ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Value: 2}, {Value: 1}, {Value: s}}},
		[]*ir.Node{
			{Name: "w", OpType: "Where", Inputs: []string{"keep", "sc", "fill"}, Outputs: []string{"w"}},
			{Name: "sm", OpType: "Add", Inputs: []string{"w", "pad"}, Outputs: []string{"sm"}},
		}, map[string]*ir.Tensor{"fill": ir.Scalar(float32(-1e4)), "keep": keep})
}

// TestCausalFillFallback checks that a fused node with a finite
// causal_fill (the CPU program's fusion of GPT-2's -1e4 chain, whose rows
// the CPU kernel checks and recomputes where the cut is not exact) runs as
// the original nodes on the GPU backend, whose attention kernel cuts with
// no check, and matches the CPU program with a left-padded first key.
func TestCausalFillFallback(t *testing.T) {
	m := gpt2Causal()
	pad := ir.NewTensor(ir.Float, []int{2, 1, 6})
	pad.Float32s()[0] = -1e4 // batch 0's query 0 keeps only a padded key
	in, fused, want := cpuFusion(t, m, pad)
	if f, _ := fused.AttrFloat("causal_fill", float32(math.Inf(-1))); f != -1e4 {
		t.Fatalf("the fused node's causal_fill is %g, want -1e4: %v", f, fused.Attrs)
	}
	s, _, id := compileOnEmu(t, m, false)
	kernels := runLikeCPU(t, s, id, in, want)
	if strings.Contains(strings.Join(kernels, " "), "attention_f32") {
		t.Errorf("kernels %v: the attention kernel ran a causal_fill node", kernels)
	}
}
