package graph

import (
	"maps"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// stripes returns the column_stripe of every FusedMatMul step of p's plan
// for in that has one, by node name.
func stripes(t *testing.T, p *Program, in map[string]*ir.Tensor) map[string]int64 {
	t.Helper()
	pl, err := p.planFor(in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, st := range pl.steps {
		if s, err := st.node.AttrInt(ops.ColumnStripeAttr, 0); st.node.OpType == ops.FusedMatMulOp && err == nil && s != 0 {
			got[st.node.Name] = s
		}
	}
	return got
}

// TestMarkStripes: on the bundled exports, a projection whose output holds
// several of Q, K and V (a fused QKV or KV projection) gets its
// column_stripe, heads·head size; separate projections (BART's, Whisper's)
// get none, as each is one stripe wide already.
func TestMarkStripes(t *testing.T) {
	for model, want := range map[string]map[string]int64{
		"s000_multi_head":       {"/Wqkv/MatMul/FusedMatMul": 32},
		"s001_cross_attention":  {"/Wkv/MatMul/FusedMatMul": 32},
		"gpt2_attention":        {"/c_attn/Gemm/FusedMatMul": 32},
		"timm_vit_attention":    {"/qkv/MatMul/FusedMatMul": 32},
		"swin_window_attention": {"/qkv/MatMul/FusedMatMul": 32},
		"bart_attention":        {},
		"whisper_attention":     {},
	} {
		t.Run(model, func(t *testing.T) {
			m, p := compileModel(t, model)
			if got := stripes(t, p, zeroInputs(t, m.Graph, modelDims)); !maps.Equal(got, want) {
				t.Errorf("column stripes %v, want %v", got, want)
			}
		})
	}
}

// TestStripedProjection runs a fused QKV projection wide enough for its
// GEMM to split the stripes between two threads (C = 128: two heads of 64,
// stripe 128 = 2·64 columns per thread share), read by an attention
// through Reshape, Transpose and Gather views, fused and unfused: the
// projection carries column_stripe 128 and both give the same output.
func TestStripedProjection(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	const s, c, heads, d = 40, 128, 2, 64
	i64 := func(dims []int, v ...int64) *ir.Tensor { return ir.FromSlice(dims, v) }
	w := randT(r, c, 3*c) // Q, K and V of unit variance: logits of spread about 1
	for i := range w.Float32s() {
		w.Float32s()[i] /= 12
	}
	perm := func(p ...int64) *ir.Attribute { return &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: p} }
	sy := synth{
		inputs: []*ir.ValueInfo{vi("x", ir.Float, 1, s, c)},
		inits: map[string]*ir.Tensor{
			"w": w, "bias": randT(r, 3*c), "shape": i64([]int{5}, 1, s, 3, heads, d),
			"i0": i64([]int{}, 0), "i1": i64([]int{}, 1), "i2": i64([]int{}, 2), "scale": sc(0.125),
		},
		nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"proj"}),
			node("Add", []string{"proj", "bias"}, []string{"qkv"}),
			node("Reshape", []string{"qkv", "shape"}, []string{"split"}),
			node("Transpose", []string{"split"}, []string{"parts"}, perm(2, 0, 3, 1, 4)),
			node("Gather", []string{"parts", "i0"}, []string{"q"}),
			node("Gather", []string{"parts", "i1"}, []string{"k"}),
			node("Gather", []string{"parts", "i2"}, []string{"v"}),
			node("Transpose", []string{"k"}, []string{"kt"}, perm(0, 1, 3, 2)),
			node("MatMul", []string{"q", "kt"}, []string{"scores"}),
			node("Mul", []string{"scores", "scale"}, []string{"scaled"}),
			node("Softmax", []string{"scaled"}, []string{"probs"}),
			node("MatMul", []string{"probs", "v"}, []string{"y"}),
		},
		outputs: []string{"y"},
	}
	in := map[string]*ir.Tensor{"x": randT(r, 1, s, c)}
	fused, unfused, fs := runFusedOp(t, sy.model(), in, ops.FusedAttentionOp)
	if len(fs) != 1 {
		t.Fatalf("%d attention fusions, want 1", len(fs))
	}
	sameOutputs(t, fused, unfused)
	p, err := Compile(sy.model(), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stripes(t, p, in), map[string]int64{"/proj/FusedMatMul": c}; !maps.Equal(got, want) {
		t.Errorf("column stripes %v, want %v", got, want)
	}
}
