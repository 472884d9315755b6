package graph

import (
	"context"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// attnOpModel is x → MatMul(W) → Split → Attention (3-D, GQA, causal) with
// an optional KV cache: the shape of an exported decoder layer.
func attnOpModel(r *rand.Rand, cache bool, dt ir.DType) *ir.Model {
	const c, hq, hkv, d = 16, 4, 2, 4
	split := ir.FromSlice([]int{3}, []int64{hq * d, hkv * d, hkv * d})
	s := synth{
		inputs: []*ir.ValueInfo{vi("x", ir.Float, 2, 5, c)},
		inits:  map[string]*ir.Tensor{"w": randT(r, c, (hq+2*hkv)*d), "split": split},
		nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"qkv"}),
			node("Split", []string{"qkv", "split"}, []string{"q", "k", "v"}, &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: 2}),
		},
		outputs: []string{"y"},
	}
	att := &ir.Node{Name: "att", OpType: "Attention", Inputs: []string{"q", "k", "v"}, Outputs: []string{"y"},
		Attrs: []*ir.Attribute{
			{Name: "q_num_heads", Type: ir.AttrInt, Int: hq}, {Name: "kv_num_heads", Type: ir.AttrInt, Int: hkv},
			{Name: "is_causal", Type: ir.AttrInt, Int: 1},
		}}
	if dt != ir.Float {
		for _, x := range []string{"q", "k", "v"} {
			s.nodes = append(s.nodes, node("Cast", []string{x}, []string{x + "16"}, &ir.Attribute{Name: "to", Type: ir.AttrInt, Int: int64(dt)}))
		}
		att.Inputs = []string{"q16", "k16", "v16"}
	}
	if cache {
		s.inputs = append(s.inputs, vi("past_k", dt, 2, hkv, 3, d), vi("past_v", dt, 2, hkv, 3, d))
		att.Inputs = append(att.Inputs, "", "past_k", "past_v")
		att.Outputs = append(att.Outputs, "present_k", "present_v")
		s.outputs = append(s.outputs, "present_k", "present_v")
	}
	s.nodes = append(s.nodes, att)
	m := s.model()
	m.Opsets[""] = 23
	return m
}

func TestAttentionOpRewrite(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	cases := []struct {
		name  string
		cache bool
		dt    ir.DType
		// nodes the rewrite runs; reads: inputs of FusedAttention
		nodes, reads string
		absorbed     string
	}{
		{"no cache: Q, K, V read in place", false, ir.Float, "", "qkv qkv qkv", "Split"},
		{"cache: K, V head split and Concat", true, ir.Float, "Reshape Transpose Concat Reshape Transpose Concat com.attnrun:FusedAttention", "qkv present_k present_v", ""},
		{"float16: Casts around the kernel", false, ir.Float16, "Cast Cast Cast com.attnrun:FusedAttention Cast", ops.AttentionTempPrefix, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := attnOpModel(r, c.cache, c.dt)
			in := map[string]*ir.Tensor{"x": randT(r, 2, 5, 16)}
			if c.cache {
				in["past_k"], in["past_v"] = randT(r, 2, 2, 3, 4), randT(r, 2, 2, 3, 4)
			}
			var results [2]map[string]*ir.Tensor
			for k, noFuse := range []bool{false, true} {
				p, err := Compile(m, Options{Threads: 2, NoFuse: noFuse})
				if err != nil {
					t.Fatal(err)
				}
				if results[k], err = p.Run(context.Background(), in, RunOptions{}); err != nil {
					t.Fatal(err)
				}
				kernels, err := p.AttentionKernels(in)
				if err != nil || len(kernels) != 1 {
					t.Fatalf("kernels %v, %v", kernels, err)
				}
				if noFuse {
					if kernels[0].Fused != nil || !strings.Contains(kernels[0].Reason, "--no-fuse") {
						t.Fatalf("with NoFuse: %+v", kernels[0])
					}
					continue
				}
				if kernels[0].Fused == nil || kernels[0].Fused.OpType != ops.FusedAttentionOp {
					t.Fatalf("Attention was not rewritten: %+v", kernels[0])
				}
				all, err := p.Fusions(in)
				if err != nil {
					t.Fatal(err)
				}
				fs := attentionFusions(all)
				if len(fs) != 1 || len(fs[0].Replaced) != 1 || fs[0].Replaced[0].OpType != "Attention" || fs[0].Node != kernels[0].Fused {
					t.Fatalf("fusions %+v", fs)
				}
				var names []string
				for _, n := range fs[0].Nodes {
					names = append(names, n.QualifiedOp())
				}
				if got := strings.Join(names, " "); got != c.nodes {
					t.Fatalf("rewrite runs %q, want %q", got, c.nodes)
				}
				reads := strings.Join(fs[0].Node.Inputs[:3], " ")
				for _, want := range strings.Fields(c.reads) {
					if !strings.Contains(reads, want) {
						t.Fatalf("FusedAttention reads %s, want %s among them", reads, c.reads)
					}
				}
				if got := opTypes(fs[0].Absorbed); got != c.absorbed {
					t.Fatalf("absorbed %q, want %q", got, c.absorbed)
				}
				// The reference: every node's own kernel, node by node.
				ref := interpret(t, p, in)
				for name, want := range ref {
					sameOutputs(t, asFloat32(results[0][name]), asFloat32(want))
				}
			}
			for name, want := range results[1] {
				sameOutputs(t, asFloat32(results[0][name]), asFloat32(want))
			}
		})
	}
}

// asFloat32 widens a float16 tensor for comparison.
func asFloat32(x *ir.Tensor) *ir.Tensor {
	if x.DType != ir.Float16 {
		return x
	}
	out := ir.NewTensor(ir.Float, x.Shape)
	for i, v := range x.Data.([]uint16) {
		out.Float32s()[i] = ir.Float16ToFloat32(v)
	}
	return out
}
