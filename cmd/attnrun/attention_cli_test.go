package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// writeAttentionModel writes an opset-23 model of one Attention node: 4-D
// GQA (8 query heads on 2 KV heads), causal, with a KV cache.
func writeAttentionModel(t *testing.T, path string) {
	t.Helper()
	f := func(name string, dims ...any) *ir.ValueInfo {
		s := make(ir.Shape, len(dims))
		for i, d := range dims {
			switch x := d.(type) {
			case int:
				s[i] = ir.Dim{Value: int64(x)}
			case string:
				s[i] = ir.Dim{Param: x}
			}
		}
		return &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: ir.Float, Shape: s, RankKnown: true}}
	}
	g := &ir.Graph{Name: "attention", Initializers: map[string]*ir.Tensor{},
		Inputs:  []*ir.ValueInfo{f("q", 1, 8, "s", 16), f("k", 1, 2, "s", 16), f("v", 1, 2, "s", 16), f("past_k", 1, 2, "p", 16), f("past_v", 1, 2, "p", 16)},
		Outputs: []*ir.ValueInfo{f("y", 1, 8, "s", 16), f("present_k", 1, 2, "t", 16), f("present_v", 1, 2, "t", 16)},
		Nodes: []*ir.Node{{Name: "self_attn", OpType: "Attention",
			Inputs: []string{"q", "k", "v", "", "past_k", "past_v"}, Outputs: []string{"y", "present_k", "present_v"},
			Attrs: []*ir.Attribute{{Name: "is_causal", Type: ir.AttrInt, Int: 1}}}},
	}
	data, err := onnx.Encode(&ir.Model{IRVersion: 10, Opsets: map[string]int64{"": 23}, Graph: g})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInspectAttention: inspect names the kernel each Attention node gets
// (the rewrite's FusedAttention step and what it computes), or why it
// runs its own kernel; run computes the model through the cpu backend.
func TestInspectAttention(t *testing.T) {
	model := filepath.Join(t.TempDir(), "attention.onnx")
	writeAttentionModel(t, model)
	r := attnrun(t, "inspect", model, "--dim", "s=3", "--dim", "p=5")
	r.wantOK(t)
	for _, want := range []string{
		"attention: 1 Attention node(s) (at q=[1x8x3x16]",
		`self_attn: com.attnrun:FusedAttention "self_attn/FusedAttention", streaming: scale 0.25; grouped KV heads (4 query heads per KV head); causal (offset 5); no Sq×Sk buffer`,
		"with Concat×2 around it",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = attnrun(t, "inspect", "--no-fuse", model)
	r.wantOK(t)
	if want := "self_attn: not rewritten (graph rewrites are off: --no-fuse); the Attention kernel runs its lowering, the same streaming FusedAttention kernel"; !strings.Contains(r.stdout, want) {
		t.Errorf("inspect --no-fuse output lacks %q:\n%s", want, r.stdout)
	}
	r = attnrun(t, "run", model, "-i", "q=random:1x8x3x16", "-i", "k=random:1x2x3x16", "-i", "v=random:1x2x3x16",
		"-i", "past_k=random:1x2x5x16", "-i", "past_v=random:1x2x5x16")
	r.wantOK(t)
	for _, want := range []string{"y: float32 [1x8x3x16]", "present_k: float32 [1x2x8x16]", "present_v: float32 [1x2x8x16]"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestInspectDescribesFusedAttention: inspect says, under each attention
// fused from primitive ops, what the FusedAttention node computes: grouped
// KV heads, a bias beside the mask, the weights it also writes.
func TestInspectDescribesFusedAttention(t *testing.T) {
	for _, c := range []struct{ model, want string }{
		{"llama_attention_opset17", "streaming: scale 0.25; grouped KV heads (2 query heads per KV head); additive mask"},
		{"llama_attention_opset17", "→ float32[batch, 4, seq, past + seq]"},
		{"gpt2_attention", "bool_false_masks mask /Cast_6_output_0; bias /Mul_output_0 added after the mask"},
		{"torch_mha_need_weights", "also writes the weights scores to /mha/Softmax_output_0 (Sq×Sk)"},
		{"whisper_attention", "bool_true_masks mask attnrun:/Slice_1_output_0/bool_mask"},
	} {
		r := attnrun(t, "inspect", filepath.Join(modelsDir, c.model, "model.onnx"))
		r.wantOK(t)
		if !strings.Contains(r.stdout, c.want) {
			t.Errorf("inspect %s does not say %q:\n%s", c.model, c.want, r.stdout)
		}
	}
}
