package graph

import (
	"fmt"
	"math"
	"math/rand"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// zeroInputs makes inputs of the graph's declared shapes with symbolic dims
// bound by sizes.
func zeroInputs(t *testing.T, g *ir.Graph, sizes map[string]int) map[string]*ir.Tensor {
	t.Helper()
	in := map[string]*ir.Tensor{}
	for _, vi := range g.Inputs {
		dims := make([]int, len(vi.Type.Shape))
		for i, d := range vi.Type.Shape {
			if d.Param != "" {
				s, ok := sizes[d.Param]
				if !ok {
					t.Fatalf("no size for %s", d.Param)
				}
				dims[i] = s
			} else {
				dims[i] = int(d.Value)
			}
		}
		in[vi.Name] = ir.NewTensor(vi.Type.DType, dims)
	}
	return in
}

// TestModelFusions checks what the rewrite does on every bundled model:
// how many regions fuse, which ops they replace, and the fused attributes;
// and that none of the replaced nodes is still a plan step.
func TestModelFusions(t *testing.T) {
	const scale8 = 0.35355338 // 1/sqrt(8)
	const scale32 = 0.17677669
	inf := math.Inf(-1)
	cases := []struct {
		model   string
		count   int
		ops     string // replaced op types of the first fusion
		scale   float64
		kT      bool
		kind    string
		fill    float64
		nomasks bool
	}{
		{"s000_single_head", 1, "Transpose MatMul Div Softmax MatMul", scale8, false, "", 0, true},
		{"s000_multi_head", 1, "Transpose MatMul Div Softmax MatMul", scale8, false, "", 0, true},
		{"s000_multi_head_attention_op", 1, "Attention", scale8, false, "", 0, true},
		// Seed 000's CausalAttention: Or (or Add on bool) of the sliced
		// causal buffer and the padding mask, split into the causal cut
		// and the padding mask (fuse_causal.go).
		{"s000_causal", 1, "Transpose MatMul Div Add Cast Where Softmax MatMul", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		{"s000_causal_or", 1, "Transpose MatMul Div Or Cast Where Softmax MatMul", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		{"s001_cross_attention", 1, "Transpose MatMul Div Where Softmax MatMul", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		{"s001_cross_attention_shared_dim", 1, "Transpose MatMul Div Where Softmax MatMul", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		{"s001_cross_attention_nomask", 1, "Transpose MatMul Div Softmax MatMul", scale8, false, "", 0, true},
		{"s001_decoder_self_attention", 1, "Transpose MatMul Div Where Softmax MatMul", scale8, false, "", 0, true}, // causal constant: the causal cut
		// Seed 002's MultiHeadAttention transposes K before the head split.
		{"s002_multi_head", 1, "MatMul Div Where Softmax MatMul", 0.5, true, ops.MaskBoolTrueMasks, inf, false},
		{"s002_self_attention_v1", 1, "Transpose MatMul Div Softmax MatMul", scale32, false, "", 0, true},
		{"s002_self_attention_v2", 1, "Transpose MatMul Div Softmax MatMul", scale32, false, "", 0, true},
		{"s002_self_attention_v3", 1, "Transpose MatMul Div Where Softmax MatMul", scale32, false, ops.MaskBoolTrueMasks, -1e20, false},
		{"s002_self_attention_final", 1, "Transpose MatMul Div Where Softmax MatMul", scale32, false, ops.MaskBoolTrueMasks, inf, false},
		{"s003_self_attention", 1, "Transpose MatMul Div Softmax MatMul", scale32, false, "", 0, true},
		{"s003_masked_self_attention", 1, "Transpose MatMul Div Where Softmax MatMul", scale32, false, ops.MaskBoolTrueMasks, -1e9, false},
		{"s003_attention", 1, "Transpose MatMul Div Where Softmax MatMul", scale32, false, ops.MaskBoolTrueMasks, -1e9, false},
		{"s003_multi_head_modulelist", 4, "Transpose MatMul Div Softmax MatMul", 0.25, false, "", 0, true},
		{"s004_param_free", 1, "Transpose MatMul Softmax MatMul", 1, false, "", 0, true},
		{"s004_multi_head_bmm", 1, "Transpose MatMul Div Softmax MatMul", scale32, false, "", 0, true},
		{"s004_multi_head_bmm_causal", 1, "Transpose MatMul Div Where Softmax MatMul", scale32, false, "", 0, true}, // causal constant: the causal cut
		{"s001_encoder_2x4", 2, "Transpose MatMul Div Where Softmax MatMul", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		// An ONNX Attention node (GQA, causal over a KV cache; opset 23).
		{"llama_block_gqa", 1, "Attention", 0.25, false, "", 0, true},
		// nn.MultiheadAttention divides q by sqrt(d) before the product
		// (folded into the scale) and adds the (padded) key padding mask as
		// a float mask Where(mask, -inf, 0)·1 (read as the bool mask); with
		// add_bias_kv, K is concatenated with bias_k after its transpose.
		{"torch_mha_bias_kv", 1, "Where Div MatMul Mul Mul Add Softmax MatMul", scale8, true, ops.MaskBoolTrueMasks, inf, false},
		{"torch_mha_zero_attn", 1, "Where Div Transpose MatMul Mul Mul Add Softmax MatMul", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		// Issue 13's exports. need_weights: the softmax output is also read
		// (the fused node writes it); a float attn_mask stays additive.
		{"torch_mha_need_weights", 1, "Where Div MatMul Mul Mul Add Softmax MatMul", scale8, true, ops.MaskBoolTrueMasks, inf, false},
		{"torch_mha_float_mask", 1, "Div MatMul Mul Add Softmax MatMul", scale8, true, ops.MaskAdditive, 0, false},
		{"torch_mha_unbatched", 1, "Where Div MatMul Mul Mul Add Softmax MatMul", scale8, true, ops.MaskBoolTrueMasks, inf, false},
		{"torch_encoder_layer", 1, "Where Div MatMul Mul Mul Add Softmax MatMul", scale8, true, ops.MaskBoolTrueMasks, inf, false},
		// nn.TransformerDecoderLayer: the float causal mask (0/-inf, folded)
		// merged with the key padding mask as Where(kpm, -inf, causal)·1:
		// the causal cut and the key padding mask.
		{"torch_decoder_layer", 2, "Where Div MatMul Mul Mul Add Softmax MatMul", scale8, true, ops.MaskBoolTrueMasks, inf, false},
		// T5: no scaling, position bias + mask added, a no-op Cast before
		// the Softmax.
		{"t5_attention", 1, "MatMul Add Add Cast Softmax MatMul", 1, true, ops.MaskAdditive, 0, false},
		// LLaMA at opset 17: K and V repeated by Expand + Reshape (kv_group),
		// Casts after the Softmax, the folded causal mask (finfo.min above
		// the diagonal, offset by the KV cache) added: the causal cut.
		{"llama_attention_opset17", 1, "Expand Reshape Expand Reshape Transpose MatMul Div Add Softmax Cast Cast MatMul", 0.25, false, "", 0, true},
		// LLaMA with a left-padded attention_mask: the folded finfo.min
		// causal mask with the padded keys masked_fill'ed with finfo.min:
		// the causal cut and the padding as a -inf bool key mask, rows
		// that see no key taking the mean of V as the export's uniform
		// softmax does.
		{"llama_padded_attention", 1, "Expand Reshape Expand Reshape Transpose MatMul Div Where Add Softmax Cast Cast MatMul", 0.25, false, ops.MaskBoolTrueMasks, inf, false},
		// transformers 4.30-4.35: the padding (0/finfo.min) added to the
		// causal finfo.min mask: the causal cut checked per row, the
		// padding its additive mask.
		{"llama_padded_attention_add", 1, "Expand Reshape Expand Reshape Transpose MatMul Div Add Add Softmax Cast Cast MatMul", 0.25, false, ops.MaskAdditive, 0, false},
		// transformers 4.44's LLaMA mask: the padding written into the
		// causal mask by a ScatterND over every position (run as an
		// Identity of its updates: scatter_full.go), the padded keys
		// found by (causal + attention_mask) == 0, which is the per-key
		// attention_mask == 0 (key_padding.go): the causal cut, with
		// the per-key test the mask, through the mask's Where, its
		// same-shape Expand, Reshape and Slice and the Identity.
		{"llama_update_causal_mask", 1, "Expand Reshape Expand Reshape Where Expand Reshape Identity Slice Transpose MatMul Div Add Softmax Cast Cast MatMul", 0.25, false, ops.MaskBoolTrueMasks, inf, false},
		// GPT-2: K split already transposed, Where with the causal buffer
		// and -1e4, then the padding mask added: the causal cut for the
		// fill -1e4 (checked per row: causal_fill), the padding its mask.
		{"gpt2_attention", 1, "MatMul Div Where Add Softmax MatMul", scale8, true, ops.MaskAdditive, 0, false},
		// GPT-2's block: the same attention between its LayerNorms.
		{"gpt2_block", 1, "MatMul Div Where Add Softmax MatMul", scale8, true, ops.MaskAdditive, 0, false},
		// Whisper: q and k each scaled by d^-1/4, the -inf causal buffer
		// added (folded: read as a bool mask, exactly causal: the causal
		// cut), Casts around the Softmax.
		{"whisper_attention", 1, "Mul Mul MatMul Add Cast Softmax Cast MatMul", scale8, true, "", 0, true},
		{"einsum_attention", 1, "Einsum Mul Where Softmax Einsum", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		{"einsum_cross_attention", 1, "Einsum Div Softmax Einsum", scale8, false, "", 0, true},
		// Each einsum's operands the other way round: K first in the
		// scores, V first in the product.
		{"einsum_swapped_attention", 1, "Einsum Div Where Softmax Einsum", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		// DALLE-pytorch: q scaled, the padding and the causal masked_fill
		// of one finite fill (the causal cut, the padding its -inf mask),
		// then the row maximum taken off between / 1024 and · 1024.
		{"dalle_stable_softmax_attention", 1, "Mul Einsum Where Where Div ReduceMax Sub Mul Softmax Einsum", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		// MPT: ALiBi, then the padding's and the future's masked_fill of
		// finfo.min: the bias first, the cut, the padding a -inf mask.
		{"mpt_attention", 1, "MatMul Mul Add Where Where Softmax MatMul", scale8, true, ops.MaskBoolTrueMasks, inf, false},
		// OPT: the causal and padding masks added through the (B, H)
		// view, then floored at finfo.min: here the padding keys the
		// plan, which folds the mask (all padding: zeros), so its bool
		// form with uniform rows (fuse_floored.go;
		// TestOPTAttentionFloored runs the computed mask).
		{"opt_attention", 1, "Transpose MatMul Reshape Add Max Reshape Softmax MatMul", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		// Gemma 2: the soft cap (/ c, tanh, · c) after the scale, then the
		// finfo.min causal constant added: the cut.
		{"gemma2_softcap_attention", 1, "MatMul Mul Div Tanh Mul Add Softmax Cast Cast MatMul", scale8, true, "", 0, true},
		// diffusers: baddbmm(empty, q, kᵀ, beta=0, alpha) adds zeros (no mask).
		{"diffusers_spatial_attention", 1, "Transpose MatMul Mul Add Cast Softmax Cast MatMul", scale8, false, "", 0, true},
		// timm's ViT: q scaled first (recent) or the scores scaled (older,
		// q, k, v read through Gathers of the permuted qkv).
		{"timm_vit_attention", 1, "Mul Transpose MatMul Softmax MatMul", scale8, false, "", 0, true},
		{"timm_vit_attention_indexed", 1, "Transpose MatMul Mul Softmax MatMul", scale8, false, "", 0, true},
		// ESPnet's Conformer attention: the content and relative-position
		// products merged into one product of the joined operands
		// (fuse_score_sum.go), the finfo.min mask read as -inf, the
		// weights zeroed after the Softmax: rows that see no key give zeros.
		{"espnet_relpos_attention", 1, "MatMul Div Where Softmax Where MatMul", scale8, true, ops.MaskBoolTrueMasks, inf, false},
		// Falcon's multi-query attention: one K/V head broadcast, the
		// causal mask built at run time from the length (folded: the cut).
		{"falcon_mqa_attention", 1, "MatMul Div Where Softmax MatMul", scale8, true, "", 0, true},
		// Mistral's sliding window: the finfo.min mask (causal, and hiding
		// the keys before the window) folded, every row keeping a key: the
		// causal cut and a bool mask of the keys before the window
		// (fuse_chain.go, keptRowsBoolMask), whose hidden blocks the
		// kernel skips.
		{"mistral_sliding_window_attention", 1, "Expand Reshape Expand Reshape Transpose MatMul Div Add Softmax Cast Cast MatMul", 0.25, false, ops.MaskBoolTrueMasks, inf, false},
		// gpt-oss: the causal finfo.min constant added (the cut), then the
		// sink logits joined as a last column (Concat: input 6, one a
		// head once the folded Expand is read back), the row maximum
		// taken off and the sink's column sliced off after the Softmax.
		{"gpt_oss_attention", 1, "Expand Reshape Expand Reshape Transpose MatMul Mul Add Concat ReduceMax Sub Softmax Cast Slice MatMul", 0.25, false, "", 0, true},
		// Swin: the position bias added, the scores viewed as (B_/nW, nW,
		// H, N, N) for the window mask and viewed back (fuse_regroup.go):
		// the mask and the bias, in the batch shape [B_/nW, nW, H].
		{"swin_window_attention", 1, "Mul Transpose MatMul Add Reshape Add Reshape Softmax MatMul", scale8, false, ops.MaskAdditive, 0, false},
		// Swin V2: cosine attention, the scores times a per-head scale
		// ([H, 1, 1], folded): the fused node reads Q times it
		// (fuse_head_scale.go); then Swin's bias and window mask.
		{"swinv2_window_attention", 1, "Transpose MatMul Mul Add Reshape Add Reshape Softmax MatMul", 1, false, ops.MaskAdditive, 0, false},
		// SAM's decomposed relative positions: the scores viewed as a grid
		// of keys, a term by grid row and one by grid column added,
		// viewed back: the fused node's bias by a key grid (fuse_grid.go).
		{"sam_relpos_attention", 1, "Mul Transpose MatMul Reshape Add Add Reshape Softmax MatMul", scale8, false, "", 0, true},
		// transformers' SamVisionAttention: the two terms summed first, the
		// sum viewed as the scores and added (never made once fused).
		{"sam_vision_attention", 1, "Mul Transpose MatMul Add Reshape Add Softmax Cast Cast MatMul", scale8, false, "", 0, true},
		// MViTv2: the key grid's bias assigned back into the scores by a
		// slice assignment (an Expand to their own shape, a full ScatterND,
		// which the plan runs as an Identity of its value: scatter_full.go).
		{"mvitv2_attention", 1, "Mul Transpose MatMul Reshape Add Add Reshape Expand Reshape Identity Softmax MatMul", scale8, false, "", 0, true},
		// LayoutLMv3: a dense bias computed on every call, the padding mask,
		// and CogView's row maximum taken off (ReduceMax without keepdims,
		// Unsqueeze) between a scale and its inverse.
		{"layoutlmv3_attention", 1, "Div MatMul Add Add Div ReduceMax Unsqueeze Sub Mul Softmax MatMul", scale8, true, ops.MaskAdditive, 0, false},
		// A learned temperature per head ([H, 1, 1], clamped: folded)
		// divides the scores: Q is divided by it before the fused node.
		{"temperature_attention", 1, "Transpose MatMul Div Where Softmax MatMul", 1, false, ops.MaskBoolTrueMasks, inf, false},
		// BERT's head_mask: the weights times a factor a head after the
		// softmax, which V takes.
		{"head_mask_attention", 1, "MatMul Div Softmax Mul MatMul", scale8, true, "", 0, true},
		// A padding mask applied after the softmax: a factor a key,
		// which V's rows take.
		{"post_softmax_key_mask_attention", 1, "Transpose MatMul Div Softmax Mul MatMul", scale8, false, "", 0, true},
		// BLOOM: heads in the batch, the scores viewed as (B, H, S, S) for
		// the masked_fill and P back as (B·H, S, S); zero inputs here, so
		// the (folded) ALiBi term is zeros (no bias) and the folded mask
		// hides every key with finfo.min.
		{"bloom_attention", 1, "MatMul Mul Add Reshape Where Softmax Cast Cast Reshape MatMul", scale8, true, ops.MaskBoolTrueMasks, -math.MaxFloat32, false},
		// transformers' BertLayer: the [B, 1, 1, S] (1 - mask)·finfo.min
		// added to the scores divided by sqrt(d): an additive per-key mask.
		{"bert_layer", 1, "MatMul Div Add Softmax MatMul", scale8, true, ops.MaskAdditive, 0, false},
		// DistilBERT: q / sqrt(d) before the product, (mask == 0) expanded
		// to the scores and masked_fill'ed with finfo.min: a bool per-key
		// mask, its Cast computed before the broadcast (fuse_narrow.go).
		{"distilbert_attention", 1, "Div MatMul Where Softmax MatMul", scale8, true, ops.MaskBoolTrueMasks, -math.MaxFloat32, false},
		// BART (transformers' BartAttention): q·scaling on the projection
		// (before the head split: folded into the scale, Q read around it),
		// heads in the batch, the scores viewed as (B, H, T, S) to add
		// _expand_mask's finfo.min mask and viewed back.
		{"bart_attention", 1, "Transpose MatMul Reshape Add Reshape Softmax MatMul", scale8, false, ops.MaskAdditive, 0, false},
		// CLIP's text encoder: BART's heads, then the finfo.min causal
		// constant and the padding mask each added through a view of the
		// scores: the checked cut, the padding the mask.
		{"clip_text_attention", 1, "Transpose MatMul Reshape Add Reshape Reshape Add Reshape Softmax MatMul", scale8, false, ops.MaskAdditive, 0, false},
		// Older-opset exports fuse as their opset-17 twins: opset 14
		// (torch's default), opset 11's attribute axes and 2-D-coerced
		// Softmax(axis=-1), the opset-14 encoder with its LayerNorms as
		// ReduceMean chains, T5 at opset 13.
		{"s000_multi_head_opset14", 1, "Transpose MatMul Div Softmax MatMul", scale8, false, "", 0, true},
		{"s000_causal_or_opset11", 1, "Transpose MatMul Div Or Cast Where Softmax MatMul", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		{"s001_encoder_2x4_opset14", 2, "Transpose MatMul Div Where Softmax MatMul", scale8, false, ops.MaskBoolTrueMasks, inf, false},
		{"t5_attention_opset13", 1, "MatMul Add Add Cast Softmax MatMul", 1, true, ops.MaskAdditive, 0, false},
		{"t5_encoder", 2, "MatMul Add Cast Softmax MatMul", 1, true, ops.MaskAdditive, 0, false},
	}
	// The fused node's attributes beyond the table's, where a model sets them.
	extras := map[string]string{
		"llama_block_gqa":                  "kv_group=2 causal=1 causal_offset=4", // is_causal after a KV cache of 4
		"torch_mha_need_weights":           "scores_mode=weights",
		"llama_attention_opset17":          "kv_group=2 causal=1 causal_offset=4", // a KV cache of 4
		"llama_padded_attention":           "kv_group=2 causal=1 masked_rows_uniform=1",
		"llama_padded_attention_add":       "kv_group=2 causal=1 causal_fill=-3.4028235e+38",
		"llama_update_causal_mask":         "kv_group=2 causal=1 masked_rows_uniform=1",
		"gpt2_attention":                   "causal=1 causal_fill=-10000",
		"gpt2_block":                       "causal=1 causal_fill=-10000",
		"s000_causal":                      "causal=1",
		"s000_causal_or":                   "causal=1",
		"s000_causal_or_opset11":           "causal=1",
		"s001_decoder_self_attention":      "causal=1",
		"s004_multi_head_bmm_causal":       "causal=1",
		"torch_decoder_layer":              "causal=1",
		"whisper_attention":                "causal=1",
		"dalle_stable_softmax_attention":   "causal=1 masked_rows_uniform=1",
		"mpt_attention":                    "bias_first=1 causal=1 masked_rows_uniform=1 bias_scale=1",
		"gemma2_softcap_attention":         "softcap=0.5 causal=1",
		"opt_attention":                    "masked_rows_uniform=1",
		"espnet_relpos_attention":          "masked_rows_zero=1",
		"falcon_mqa_attention":             "causal=1",
		"mistral_sliding_window_attention": "kv_group=2 causal=1",
		"gpt_oss_attention":                "kv_group=2 causal=1",
		"swin_window_attention":            "bias_scale=1",
		"swinv2_window_attention":          "bias_scale=1",
		"clip_text_attention":              "causal=1 causal_fill=-3.4028235e+38",
		"t5_attention":                     "bias_scale=1 bias_diagonals=1",
		"t5_attention_opset13":             "bias_scale=1 bias_diagonals=1",
		"t5_encoder":                       "bias_scale=1 bias_diagonals=1",
		"sam_relpos_attention":             "bias_scale=1 bias_grid=7",
		"sam_vision_attention":             "bias_scale=1 bias_grid=4",
		"layoutlmv3_attention":             "bias_scale=1",
		"mvitv2_attention":                 "bias_scale=1 bias_grid=6",
	}
	all, _ := filepath.Glob("../../models/*/model.onnx")
	if len(all) != len(cases) {
		t.Errorf("%d models, %d cases: add the new model here", len(all), len(cases))
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			m, p := compileModel(t, c.model)
			in := zeroInputs(t, m.Graph, modelDims)
			all, err := p.Fusions(in)
			if err != nil {
				t.Fatal(err)
			}
			fs := attentionFusions(all)
			if len(fs) != c.count {
				t.Fatalf("%d fusions, want %d", len(fs), c.count)
			}
			var got []string
			for _, n := range fs[0].Replaced {
				got = append(got, n.OpType)
			}
			if g := strings.Join(got, " "); g != c.ops {
				t.Errorf("replaced %s, want %s", g, c.ops)
			}
			n := fs[0].Node
			if n.QualifiedOp() != "com.attnrun:FusedAttention" {
				t.Errorf("fused op %s", n.QualifiedOp())
			}
			if s, _ := n.AttrFloat("scale", 0); math.Abs(float64(s)-c.scale) > 1e-6 {
				t.Errorf("scale %g, want %g", s, c.scale)
			}
			if sinks := n.Input(6) != ""; sinks != (c.model == "gpt_oss_attention") {
				t.Errorf("sinks input %v", sinks)
			}
			if kt, _ := n.AttrInt("k_transposed", 0); (kt == 1) != c.kT {
				t.Errorf("k_transposed %d, want %v", kt, c.kT)
			}
			kind, _ := n.AttrString("mask_kind", "")
			if kind != c.kind || (n.Input(3) == "") != c.nomasks {
				t.Errorf("mask_kind %q with %d inputs, want %q", kind, len(n.Inputs), c.kind)
			}
			got = nil
			for _, a := range n.Attrs {
				switch a.Name {
				case "kv_group", "bias_first", "bias_diagonals", "bias_grid", "causal", "causal_offset", "masked_rows_uniform", "masked_rows_zero":
					got = append(got, fmt.Sprintf("%s=%d", a.Name, a.Int))
				case "bias_scale", "causal_fill", "softcap", "scores_min":
					got = append(got, fmt.Sprintf("%s=%g", a.Name, a.Float))
				case "scores_mode":
					got = append(got, fmt.Sprintf("%s=%s", a.Name, a.String))
				}
			}
			if g := strings.Join(got, " "); g != extras[c.model] {
				t.Errorf("attributes %q, want %q", g, extras[c.model])
			}
			if c.kind != "" {
				if f, _ := n.AttrFloat("mask_fill", 0); float64(f) != float64(float32(c.fill)) {
					t.Errorf("mask_fill %g, want %g", f, c.fill)
				}
			}
			pl, err := p.planFor(in)
			if err != nil {
				t.Fatal(err)
			}
			replaced := map[*ir.Node]bool{}
			for _, f := range fs {
				for _, n := range f.Replaced {
					replaced[n] = true
				}
			}
			fused := 0
			for _, st := range pl.steps {
				if replaced[st.node] {
					t.Errorf("replaced node %q is still a step", st.node.Label())
				}
				if st.node.OpType == "FusedAttention" {
					fused++
				}
			}
			if fused != c.count {
				t.Errorf("%d fused steps, want %d", fused, c.count)
			}
		})
	}
}

// modelDims sizes the dim_params of the bundled models.
var modelDims = map[string]int{"batch": 2, "seq": 5, "enc_seq": 7, "seq_q": 5, "seq_kv": 7, "S": 6, "past": 4, "mem_seq": 7, "height": 3, "width": 4, "bw": 6, "nw": 3}

// attentionFusions keeps the FusedAttention fusions (the MatMul rewrite
// makes others).
func attentionFusions(all []Fusion) []Fusion {
	var out []Fusion
	for _, f := range all {
		if f.Node.OpType == ops.FusedAttentionOp {
			out = append(out, f)
		}
	}
	return out
}

// synth builds a one-graph model from nodes over float inputs.
type synth struct {
	inputs  []*ir.ValueInfo
	inits   map[string]*ir.Tensor
	nodes   []*ir.Node
	outputs []string
}

func (s synth) model() *ir.Model {
	g := &ir.Graph{Name: "t", Inputs: s.inputs, Nodes: s.nodes, Initializers: map[string]*ir.Tensor{}}
	for name, t := range s.inits {
		g.Initializers[name] = t
		g.InitializerOrder = append(g.InitializerOrder, name)
	}
	for _, o := range s.outputs {
		g.Outputs = append(g.Outputs, &ir.ValueInfo{Name: o})
	}
	return &ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
}

func vi(name string, dt ir.DType, dims ...int) *ir.ValueInfo {
	return &ir.ValueInfo{Name: name, Type: ops.Known(dt, dims)}
}

func node(op string, in, out []string, attrs ...*ir.Attribute) *ir.Node {
	return &ir.Node{Name: "/" + out[0], OpType: op, Inputs: in, Outputs: out, Attrs: attrs}
}

func sc(v float32) *ir.Tensor { return ir.Scalar(v) }

// runBoth runs a model fused and unfused and returns both outputs and the
// fused plan's fusions.
func runBoth(t *testing.T, m *ir.Model, in map[string]*ir.Tensor) (fused, unfused *ir.Tensor, fs []Fusion) {
	t.Helper()
	f, u, fs := runAll(t, m, in)
	y := m.Graph.Outputs[0].Name
	return f[y], u[y], fs
}

// oneFusion requires exactly one fusion, replacing nodes of the op types
// ops (space-separated, in order), and returns its node.
func oneFusion(t *testing.T, fs []Fusion, ops string) *ir.Node {
	t.Helper()
	if len(fs) != 1 {
		t.Fatalf("%d fusions, want 1", len(fs))
	}
	var got []string
	for _, n := range fs[0].Replaced {
		got = append(got, n.OpType)
	}
	if g := strings.Join(got, " "); g != ops {
		t.Errorf("replaced %s, want %s", g, ops)
	}
	return fs[0].Node
}

func sameOutputs(t *testing.T, got, want *ir.Tensor) {
	t.Helper()
	if !slices.Equal(got.Shape, want.Shape) {
		t.Fatalf("fused shape %v, unfused %v", got.Shape, want.Shape)
	}
	for i, w := range want.Float32s() {
		g := got.Float32s()[i]
		if math.IsNaN(float64(w)) != math.IsNaN(float64(g)) || math.Abs(float64(g-w)) > 1e-5+1e-4*math.Abs(float64(w)) {
			t.Fatalf("element %d: fused %g, unfused %g", i, g, w)
		}
	}
}

func randT(r *rand.Rand, dims ...int) *ir.Tensor {
	t := ir.NewTensor(ir.Float, dims)
	for i := range t.Float32s() {
		t.Float32s()[i] = float32(r.NormFloat64())
	}
	return t
}

// TestFusePatterns covers chain forms the seed exports do not all use:
// Mul scales on either side, a scale after the mask, Where with the fill
// second, additive masks on either side of Add, K given transposed, and
// fully masked rows with -inf (NaN, as unfused) and -1e9 (uniform).
func TestFusePatterns(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	const b, h, s, d = 2, 2, 6, 4
	qkv := []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, h, s, d), vi("v", ir.Float, b, h, s, d)}
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 1, 3, 2}}
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	head := []*ir.Node{node("Transpose", []string{"k"}, []string{"kt"}, perm), node("MatMul", []string{"q", "kt"}, []string{"s0"})}
	tail := func(x string) []*ir.Node {
		return []*ir.Node{node("Softmax", []string{x}, []string{"p"}, axis), node("MatMul", []string{"p", "v"}, []string{"y"})}
	}
	chain := func(mid ...*ir.Node) []*ir.Node {
		out := append(append([]*ir.Node{}, head...), mid...)
		return append(out, tail(mid[len(mid)-1].Outputs[0])...)
	}
	boolMask := ir.NewTensor(ir.Bool, []int{b, 1, s, s})
	for i := range boolMask.Bools() {
		boolMask.Bools()[i] = r.Intn(3) == 0
	}
	for j := 0; j < s; j++ { // query row 2 of batch 0 fully masked
		boolMask.Bools()[2*s+j] = true
	}
	addMask := randT(r, 1, 1, s, s)
	addMask.Float32s()[3] = float32(math.Inf(-1))
	mvi := vi("m", ir.Bool, b, 1, s, s)
	avi := vi("m", ir.Float, 1, 1, s, s)
	cases := []struct {
		name     string
		syn      synth
		mask     *ir.Tensor
		ops      string
		attrs    map[string]float32 // float attributes to check
		kind     string
		kT       bool
		wantNaN  bool
		wantNone bool
	}{
		{name: "Mul scale before and after", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"c1": sc(0.5), "c2": sc(3)},
			nodes: chain(node("Mul", []string{"c1", "s0"}, []string{"s1"}), node("Div", []string{"s1", "c2"}, []string{"s2"}))},
			ops: "Transpose MatMul Mul Div Softmax MatMul", attrs: map[string]float32{"scale": 0.5 / 3.0}},
		{name: "scale after -inf mask, full row NaN", syn: synth{inputs: append(qkv, mvi), inits: map[string]*ir.Tensor{"fill": sc(float32(math.Inf(-1))), "c": sc(2)},
			nodes: chain(node("Where", []string{"m", "fill", "s0"}, []string{"s1"}), node("Div", []string{"s1", "c"}, []string{"s2"}))},
			mask: boolMask, ops: "Transpose MatMul Where Div Softmax MatMul", kind: ops.MaskBoolTrueMasks,
			attrs: map[string]float32{"scale": 0.5, "mask_fill": float32(math.Inf(-1))}, wantNaN: true},
		{name: "-1e9 fill then scale, full row uniform", syn: synth{inputs: append(qkv, mvi), inits: map[string]*ir.Tensor{"fill": sc(-1e9), "c": sc(4)},
			nodes: chain(node("Where", []string{"m", "fill", "s0"}, []string{"s1"}), node("Mul", []string{"s1", "c"}, []string{"s2"}))},
			mask: boolMask, ops: "Transpose MatMul Where Mul Softmax MatMul", kind: ops.MaskBoolTrueMasks,
			attrs: map[string]float32{"scale": 4, "mask_fill": -4e9}},
		{name: "Where keeps on true", syn: synth{inputs: append(qkv, mvi), inits: map[string]*ir.Tensor{"fill": sc(-1e9), "c": sc(2)},
			nodes: chain(node("Div", []string{"s0", "c"}, []string{"s1"}), node("Where", []string{"m", "s1", "fill"}, []string{"s2"}))},
			mask: boolMask, ops: "Transpose MatMul Div Where Softmax MatMul", kind: ops.MaskBoolFalseMasks,
			attrs: map[string]float32{"scale": 0.5, "mask_fill": -1e9}},
		{name: "additive mask first operand, scale after", syn: synth{inputs: append(qkv, avi), inits: map[string]*ir.Tensor{"c": sc(0.5)},
			nodes: chain(node("Add", []string{"m", "s0"}, []string{"s1"}), node("Mul", []string{"s1", "c"}, []string{"s2"}))},
			mask: addMask, ops: "Transpose MatMul Add Mul Softmax MatMul", kind: ops.MaskAdditive,
			attrs: map[string]float32{"scale": 0.5, "mask_scale": 0.5}},
		{name: "K given transposed", syn: synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("kt", ir.Float, b, h, d, s), vi("v", ir.Float, b, h, s, d)},
			nodes: append([]*ir.Node{node("MatMul", []string{"q", "kt"}, []string{"s0"})}, tail("s0")...)},
			ops: "MatMul Softmax MatMul", kT: true, attrs: map[string]float32{"scale": 1}},
		{name: "scores also a graph output: not fused", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"c": sc(2)},
			nodes: chain(node("Div", []string{"s0", "c"}, []string{"s1"})), outputs: []string{"s1"}}, wantNone: true},
		{name: "softmax not on the last axis: not fused", syn: synth{inputs: qkv,
			nodes: append(append([]*ir.Node{}, head...), node("Softmax", []string{"s0"}, []string{"p"}, &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: 2}), node("MatMul", []string{"p", "v"}, []string{"y"}))}, wantNone: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.syn.outputs = append([]string{"y"}, c.syn.outputs...)
			m := c.syn.model()
			in := map[string]*ir.Tensor{}
			for _, v := range m.Graph.Inputs {
				if v.Name == "m" {
					in["m"] = c.mask
				} else {
					dims, _ := v.Type.Shape.Concrete()
					in[v.Name] = randT(r, dims...)
				}
			}
			fused, unfused, fs := runBoth(t, m, in)
			sameOutputs(t, fused, unfused)
			if c.wantNone {
				if len(fs) != 0 {
					t.Fatalf("%d fusions, want none", len(fs))
				}
				return
			}
			n := oneFusion(t, fs, c.ops)
			for name, want := range c.attrs {
				if g, _ := n.AttrFloat(name, float32(math.NaN())); g != want && math.Abs(float64(g-want)) > 1e-6*math.Abs(float64(want)) {
					t.Errorf("%s = %g, want %g", name, g, want)
				}
			}
			if kind, _ := n.AttrString("mask_kind", ""); kind != c.kind {
				t.Errorf("mask_kind %q, want %q", kind, c.kind)
			}
			if kt, _ := n.AttrInt("k_transposed", 0); (kt == 1) != c.kT {
				t.Errorf("k_transposed %d, want %v", kt, c.kT)
			}
			nans := 0
			for _, v := range fused.Float32s() {
				if math.IsNaN(float64(v)) {
					nans++
				}
			}
			if c.wantNaN && nans != h*d {
				t.Errorf("%d NaN outputs, want the %d of the fully masked row (in each head)", nans, h*d)
			}
			if !c.wantNaN && nans != 0 {
				t.Errorf("%d NaN outputs, want none", nans)
			}
		})
	}
}

// stepOpTypes is the op types of the steps p runs for inputs in, space
// separated (opTypes).
func stepOpTypes(t *testing.T, p *Program, in map[string]*ir.Tensor) string {
	t.Helper()
	steps, err := p.Steps(in)
	if err != nil {
		t.Fatal(err)
	}
	return opTypes(steps)
}

// wantSteps compiles m with the rewrites on (2 threads) and checks the op
// types of its plan's steps for inputs in.
func wantSteps(t *testing.T, m *ir.Model, in map[string]*ir.Tensor, want string) {
	t.Helper()
	p, err := Compile(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := stepOpTypes(t, p, in); got != want {
		t.Errorf("steps %q, want %q", got, want)
	}
}

// fusedPlan compiles m with the rewrites on (2 threads) and returns the
// program and its plan's fusions for inputs in that keep accepts.
func fusedPlan(t *testing.T, m *ir.Model, in map[string]*ir.Tensor, keep func(Fusion) bool) (*Program, []Fusion) {
	t.Helper()
	p, err := Compile(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	all, err := p.Fusions(in)
	if err != nil {
		t.Fatal(err)
	}
	var fs []Fusion
	for _, f := range all {
		if keep(f) {
			fs = append(fs, f)
		}
	}
	return p, fs
}
