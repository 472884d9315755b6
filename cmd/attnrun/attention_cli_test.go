package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/viz"
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
// KV heads, the weights it also writes, a causal mask read as the causal
// cut (alone, beside a key padding mask, or for a finite fill checked per
// row); and what a FusedMatMul does in its GEMM epilogue (an activation,
// LLaMA's SwiGLU gate, a residual add).
func TestInspectDescribesFusedAttention(t *testing.T) {
	for _, c := range []struct{ model, want string }{
		{"llama_attention_opset17", "streaming: scale 0.25; grouped KV heads (2 query heads per KV head); causal (offset 8); reads K"},
		{"torch_decoder_layer", "causal (offset 0); bool_true_masks mask /dec/self_attn/Cast_2_output_0;"},
		{"llama_attention_opset17", "→ float32[batch, 4, seq, past + seq]"},
		{"gpt2_attention", "causal (offset 0; cut for the fill -10000, checked per row); additive mask /Mul_output_0;"},
		{"torch_mha_need_weights", "also writes the weights scores to /mha/Softmax_output_0 (Sq×Sk)"},
		{"whisper_attention", "streaming: scale 0.353553; causal (offset 0); reads Q"},
		{"s000_causal_or", "causal (offset 0); bool_true_masks mask /Reshape_1_output_0;"},
		{"swin_window_attention", "streaming: scale 0.353553; additive mask onnx::Add_113; bias /Unsqueeze_8_output_0 added after the mask; reads Q from /qkv/Add_output_0, K from /qkv/Add_output_0, V from /qkv/Add_output_0 through views (no copies)"},
		{"gpt2_block", "/mlp/c_proj/Gemm/FusedMatMul (residual /Add_output_0) replaces Gemm(/mlp/c_proj/Gemm) Reshape(/mlp/c_proj/Reshape_1) Add(/Add_1)"},
		{"torch_encoder_layer", "/enc/layers.0/linear1/MatMul/FusedMatMul (activation Relu) replaces MatMul(/enc/layers.0/linear1/MatMul) Add(/enc/layers.0/linear1/Add) Relu(/enc/layers.0/Relu)"},
		{"llama_block_gqa", "/w1/FusedMatMul (activation Silu, gate up) replaces MatMul(/w1) Sigmoid(/silu/Sigmoid) Mul(/silu/Mul) Mul(/ffn)"},
	} {
		r := attnrun(t, "inspect", filepath.Join(modelsDir, c.model, "model.onnx"))
		r.wantOK(t)
		if !strings.Contains(r.stdout, c.want) {
			t.Errorf("inspect %s does not say %q:\n%s", c.model, c.want, r.stdout)
		}
	}
}

// TestAttentionMapsGreyPastKeyLengths: an opset-24 Attention node's
// nonpad_kv_seqlen masks each batch item's keys at or beyond its length;
// the heat maps draw them grey (masked), not as weights of 0. Item 0 keeps
// 3 of 6 keys, item 1 all 6.
func TestAttentionMapsGreyPastKeyLengths(t *testing.T) {
	dir := t.TempDir()
	vi := func(name string, dt ir.DType, dims ...int64) *ir.ValueInfo {
		s := make(ir.Shape, len(dims))
		for i, d := range dims {
			s[i] = ir.Dim{Value: d}
		}
		return &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: dt, Shape: s, RankKnown: true}}
	}
	g := &ir.Graph{Name: "padded_kv", Initializers: map[string]*ir.Tensor{},
		Inputs:  []*ir.ValueInfo{vi("q", ir.Float, 2, 2, 4, 8), vi("k", ir.Float, 2, 2, 6, 8), vi("v", ir.Float, 2, 2, 6, 8), vi("kv_len", ir.Int64, 2)},
		Outputs: []*ir.ValueInfo{vi("y", ir.Float, 2, 2, 4, 8)},
		Nodes: []*ir.Node{{Name: "attn", OpType: "Attention",
			Inputs: []string{"q", "k", "v", "", "", "", "kv_len"}, Outputs: []string{"y"}}},
	}
	data, err := onnx.Encode(&ir.Model{IRVersion: 10, Opsets: map[string]int64{"": 24}, Graph: g})
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "padded_kv.onnx")
	if err := os.WriteFile(model, data, 0o644); err != nil {
		t.Fatal(err)
	}
	lengths := filepath.Join(dir, "kv_len.npy")
	writeNpy(t, lengths, &ir.Tensor{DType: ir.Int64, Shape: []int{2}, Data: []int64{3, 6}})
	out := filepath.Join(dir, "maps")
	r := attnrun(t, "run", model, "-i", "q=random:2x2x4x8", "-i", "k=random:2x2x6x8", "-i", "v=random:2x2x6x8",
		"-i", "kv_len="+lengths, "--attention-maps", out)
	r.wantOK(t)
	w := readNpy(t, filepath.Join(out, "core0.npy")).Float32s()
	for row := 0; row < 2*4; row++ { // item 0's rows: keys 3..5 weigh 0
		for j := 3; j < 6; j++ {
			if w[row*6+j] != 0 {
				t.Fatalf("item 0, row %d, key %d: weight %v past the key length", row, j, w[row*6+j])
			}
		}
	}
	grey := func(png string) int {
		img := readPNG(t, filepath.Join(out, png))
		n, b := 0, img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				if color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA) == viz.MaskedColor {
					n++
				}
			}
		}
		return n
	}
	for h := 0; h < 2; h++ {
		padded, full := grey(fmt.Sprintf("core0_b0_h%d.png", h)), grey(fmt.Sprintf("core0_b1_h%d.png", h))
		// Half of item 0's cells are masked; cells are far larger than the
		// few grey pixels anti-aliased text may hit.
		if padded < 1000 || padded < 20*(full+1) {
			t.Errorf("head %d: %d grey pixels for item 0 (3 of 6 keys masked), %d for item 1 (none)", h, padded, full)
		}
	}
}

// TestDescribeFusedAttentionBias: a bias beside the mask is named with the
// side of the mask it is added on (no bundled model keeps one since GPT-2's
// chain became the causal cut).
func TestDescribeFusedAttentionBias(t *testing.T) {
	for _, c := range []struct {
		first int64
		want  string
	}{
		{0, "bool_false_masks mask m; bias b added after the mask"},
		{1, "bool_false_masks mask m; bias b added before the mask"},
	} {
		n := &ir.Node{OpType: ops.FusedAttentionOp, Domain: ops.DomainAttnrun, Inputs: []string{"q", "k", "v", "m", "", "b"}, Outputs: []string{"y"},
			Attrs: []*ir.Attribute{{Name: "mask_kind", Type: ir.AttrString, String: []byte(ops.MaskBoolFalseMasks)}, {Name: "bias_first", Type: ir.AttrInt, Int: c.first}}}
		if got := describeFusedAttention(n); !strings.Contains(got, c.want) {
			t.Errorf("bias_first %d: %q does not say %q", c.first, got, c.want)
		}
	}
}

// TestInspectSaysWhyAttentionIsUnfused: for a PyTorch export whose
// attention the fusion does not take (talking heads: the heads' scores
// mixed by an einsum), inspect lists the core under "unfused:" with the
// node that stops it; a fused model has no such line.
func TestInspectSaysWhyAttentionIsUnfused(t *testing.T) {
	r := attnrun(t, "inspect", filepath.Join("..", "..", "runtime", "graph", "testdata", "unfused", "talking_heads_attention", "model.onnx"))
	r.wantOK(t)
	for _, want := range []string{
		"unfused:  1 attention core(s) run node by node",
		`Softmax(/Softmax) → Einsum(/Einsum_2): einsum node "/Einsum_1" ("b h i j, h k -> b k i j") is not a product of Q and K over one contracted label, into [.., Sq, Sk]`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect does not say %q:\n%s", want, r.stdout)
		}
	}
	r = attnrun(t, "inspect", filepath.Join(modelsDir, "einsum_swapped_attention", "model.onnx"))
	r.wantOK(t)
	if strings.Contains(r.stdout, "unfused:") || !strings.Contains(r.stdout, "/FusedAttention replaces Einsum(/Einsum) Div(/Div) Where(/Where) Softmax(/Softmax) Einsum(/Einsum_1)") {
		t.Errorf("inspect of einsum_swapped_attention:\n%s", r.stdout)
	}
}
