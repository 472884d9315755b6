package graph

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/ops"
)

// TestAttentionCores finds every seed model's attention cores: the Softmax
// feeding P·V, the chain back to the scores MatMul, and the mask.
func TestAttentionCores(t *testing.T) {
	cases := []struct {
		model    string
		cores    int
		maskKind string
	}{
		{"s000_single_head", 1, ""},
		{"s000_multi_head", 1, ""},
		{"s000_causal", 1, ops.MaskBoolTrueMasks},
		{"s000_causal_or", 1, ops.MaskBoolTrueMasks},
		{"s001_cross_attention", 1, ops.MaskBoolTrueMasks},
		{"s001_cross_attention_nomask", 1, ""},
		{"s001_decoder_self_attention", 1, ops.MaskBoolTrueMasks},
		{"s001_encoder_2x4", 2, ops.MaskBoolTrueMasks},
		{"s002_multi_head", 1, ops.MaskBoolTrueMasks},
		{"s002_self_attention_final", 1, ops.MaskBoolTrueMasks},
		{"s002_self_attention_v1", 1, ""},
		{"s002_self_attention_v2", 1, ""},
		{"s002_self_attention_v3", 1, ops.MaskBoolTrueMasks},
		{"s003_attention", 1, ops.MaskBoolTrueMasks},
		{"s003_masked_self_attention", 1, ops.MaskBoolTrueMasks},
		{"s003_multi_head_modulelist", 4, ""},
		{"s003_self_attention", 1, ""},
		{"s004_multi_head_bmm", 1, ""},
		{"s004_multi_head_bmm_causal", 1, ops.MaskBoolTrueMasks},
		{"s004_param_free", 1, ""},
		{"s001_cross_attention_shared_dim", 1, ops.MaskBoolTrueMasks},
		{"torch_mha_bias_kv", 1, ops.MaskAdditive},
		{"torch_mha_zero_attn", 1, ops.MaskAdditive},
		// Issue 13's exports: Casts around the Softmax (T5, LLaMA, Whisper),
		// einsum products, two masks (GPT-2: the Where's is the core's).
		{"torch_mha_need_weights", 1, ops.MaskAdditive},
		{"torch_mha_float_mask", 1, ops.MaskAdditive},
		{"torch_mha_unbatched", 1, ops.MaskAdditive},
		{"torch_encoder_layer", 1, ops.MaskAdditive},
		{"torch_decoder_layer", 2, ops.MaskAdditive},
		{"t5_attention", 1, ops.MaskAdditive},
		{"llama_attention_opset17", 1, ops.MaskAdditive},
		{"llama_padded_attention", 1, ops.MaskAdditive},
		{"llama_padded_attention_add", 1, ops.MaskAdditive},
		{"gpt2_attention", 1, ops.MaskBoolFalseMasks},
		{"gpt2_block", 1, ops.MaskBoolFalseMasks},
		{"whisper_attention", 1, ops.MaskAdditive},
		{"einsum_attention", 1, ops.MaskBoolTrueMasks},
		{"einsum_cross_attention", 1, ""},
		{"einsum_swapped_attention", 1, ops.MaskBoolTrueMasks},
		{"dalle_stable_softmax_attention", 1, ops.MaskBoolTrueMasks},
		{"mpt_attention", 1, ops.MaskBoolTrueMasks},
		{"gemma2_softcap_attention", 1, ops.MaskAdditive},
		{"opt_attention", 1, ""},                             // its mask is added to the (B, H) view of the (B·H) scores: the maps find none (Swin's too)
		{"diffusers_spatial_attention", 1, ops.MaskAdditive}, // baddbmm's beta=0 term: zeros, structurally added
		{"timm_vit_attention", 1, ""},
		{"timm_vit_attention_indexed", 1, ""},
		{"espnet_relpos_attention", 1, ops.MaskBoolTrueMasks}, // P·V reads the weights through the zeroing Where
		{"falcon_mqa_attention", 1, ops.MaskBoolTrueMasks},
		{"mistral_sliding_window_attention", 1, ops.MaskAdditive},
		{"gpt_oss_attention", 1, ops.MaskAdditive}, // the row maximum's Sub is no mask
		{"llama_update_causal_mask", 1, ops.MaskAdditive},
		// Reshapes regrouping the batch in the chain: BLOOM's masked_fill
		// on the weights' shape between its views; Swin's window mask and
		// position bias are added to scores of other shapes (no mask).
		{"swin_window_attention", 1, ""},
		{"swinv2_window_attention", 1, ""},
		{"temperature_attention", 1, ops.MaskBoolTrueMasks},
		{"sam_relpos_attention", 1, ""}, // its terms are added to the scores' grid view (no mask)
		{"sam_vision_attention", 1, ops.MaskAdditive},
		{"layoutlmv3_attention", 1, ops.MaskAdditive},
		{"mvitv2_attention", 1, ""},
		{"head_mask_attention", 1, ""},
		{"post_softmax_key_mask_attention", 1, ""},
		{"bloom_attention", 1, ops.MaskBoolTrueMasks},
		{"bert_layer", 1, ops.MaskAdditive},
		{"distilbert_attention", 1, ops.MaskBoolTrueMasks},
		{"bart_attention", 1, ""},      // partial, see below
		{"clip_text_attention", 1, ""}, // partial, as BART's
		// Older-opset exports (models/*_opsetN): as their opset-17 twins.
		{"s000_multi_head_opset14", 1, ""},
		{"s000_causal_or_opset11", 1, ops.MaskBoolTrueMasks},
		{"s001_encoder_2x4_opset14", 2, ops.MaskBoolTrueMasks},
		{"t5_attention_opset13", 1, ops.MaskAdditive},
		{"t5_encoder", 2, ops.MaskAdditive},
		// ONNX Attention nodes: their weights are qk_matmul_output (mode 3),
		// which they do not return yet.
		{"s000_multi_head_attention_op", 1, ""},
		{"llama_block_gqa", 1, ""},
	}
	// Partial chains stop at the Softmax's input, a Reshape whose symbolic
	// shapes do not show that it keeps the matrices (BART's view of the
	// (B·H, ?, ?) bmm: inference does not follow the lengths through the
	// -1 of view(bsz·H, -1, D)): the core's weights are found, its mask is
	// not. The plan-time fusion sees the concrete shapes and fuses it.
	partial := map[string]bool{"bart_attention": true, "clip_text_attention": true}
	all, _ := filepath.Glob("../../models/*/model.onnx")
	if len(all) != len(cases) {
		t.Errorf("%d models in models/, %d cases here: add the new ones", len(all), len(cases))
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			_, p := compileModel(t, c.model)
			cores := p.AttentionCores()
			if len(cores) != c.cores {
				t.Fatalf("%d cores, want %d", len(cores), c.cores)
			}
			for _, core := range cores {
				if core.Attention != nil {
					if !core.NeedsOutput || core.Attention.OpType != "Attention" || core.Softmax != core.Attention {
						t.Errorf("Attention core %+v", core)
					}
					continue
				}
				if core.Weights != core.Softmax.Outputs[0] || !slices.Contains(core.Output.Inputs, core.Nodes[len(core.Nodes)-2].Outputs[0]) {
					t.Errorf("core %s: weights %q are not the Softmax output read by P·V", core.Softmax.Label(), core.Weights)
				}
				first := core.Nodes[0]
				if partial[c.model] {
					if first != core.Softmax {
						t.Errorf("core %s: chain starts at %s (%s), want the Softmax (partial)", core.Softmax.Label(), first.Label(), first.OpType)
					}
				} else if (first.OpType != "MatMul" && first.OpType != "Einsum") || first == core.Output {
					t.Errorf("core %s: chain starts at %s (%s), want the scores MatMul or Einsum", core.Softmax.Label(), first.Label(), first.OpType)
				}
				if core.MaskKind != c.maskKind || (core.Mask == "") != (c.maskKind == "") {
					t.Errorf("core %s: mask %q kind %q, want kind %q", core.Softmax.Label(), core.Mask, core.MaskKind, c.maskKind)
				}
				if w := p.Types[core.Weights].Type; !w.RankKnown || len(w.Shape) < 2 {
					t.Errorf("core %s: weights type %v", core.Softmax.Label(), w)
				}
			}
		})
	}
}

// compileModel loads and compiles a model of models/.
func compileModel(t testing.TB, name string) (*ir.Model, *Program) {
	t.Helper()
	m, err := onnx.Load(filepath.Join("../../models", name, "model.onnx"), onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m, p
}

// TestAttentionWeightsFused: with each core's weights a graph output, the
// attention still fuses, its FusedAttention step writing them as output 1
// (scores_mode "weights"), and they equal what the unfused Softmax
// computes; without them, the fused step has no output 1, so a normal run
// never holds Sq×Sk scores.
func TestAttentionWeightsFused(t *testing.T) {
	for _, name := range []string{"s000_causal", "s001_encoder_2x4", "s002_self_attention_final", "s000_multi_head_attention_op"} {
		t.Run(name, func(t *testing.T) {
			m, p := compileModel(t, name)
			cores := p.AttentionCores()
			m = WithAttentionWeights(m, cores)
			asked, err := Compile(m, Options{})
			if err != nil {
				t.Fatal(err)
			}
			cores = asked.AttentionCores()
			g := *m.Graph
			g.Outputs = append([]*ir.ValueInfo(nil), g.Outputs...)
			for _, c := range cores {
				g.Outputs = append(g.Outputs, &ir.ValueInfo{Name: c.Weights, Type: asked.Types[c.Weights].Type})
			}
			exposed := *m
			exposed.Graph = &g
			in := benchInputs(p, 6)
			// Padding masks that mask one key in six (bool True, int64 0).
			for _, tn := range in {
				switch v := tn.Data.(type) {
				case []bool:
					for i := range v {
						v[i] = i%6 == 5
					}
				case []int64:
					for i := range v {
						v[i] = int64(min(i%6, 1))
					}
				}
			}

			plain, err := p.Fusions(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range attentionFusions(plain) {
				if len(f.Node.Outputs) != 1 || f.Node.Attr("scores_mode") != nil {
					t.Errorf("a normal plan's %s has outputs %v", f.Node.Label(), f.Node.Outputs)
				}
			}

			fused, err := Compile(&exposed, Options{})
			if err != nil {
				t.Fatal(err)
			}
			fs, err := fused.Fusions(in)
			if err != nil {
				t.Fatal(err)
			}
			fs = attentionFusions(fs)
			if len(fs) != len(cores) {
				t.Fatalf("%d attention fusions for %d cores with their weights exposed", len(fs), len(cores))
			}
			for i, f := range fs {
				mode, _ := f.Node.AttrString("scores_mode", "")
				if len(f.Node.Outputs) != 2 || f.Node.Outputs[1] != cores[i].Weights || mode != ops.ScoresWeights {
					t.Errorf("%s: outputs %v, scores_mode %q; want output 1 %q in mode weights", f.Node.Label(), f.Node.Outputs, mode, cores[i].Weights)
				}
			}

			unfused, err := Compile(&exposed, Options{NoFuse: true})
			if err != nil {
				t.Fatal(err)
			}
			got, err := fused.Run(context.Background(), in, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := unfused.Run(context.Background(), in, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cores {
				gw, ww := got[c.Weights].Float32s(), want[c.Weights].Float32s()
				if len(gw) != len(ww) || len(gw) == 0 {
					t.Fatalf("%s: %d and %d weights", c.Weights, len(gw), len(ww))
				}
				finite := 0
				for i := range gw {
					if !math.IsNaN(float64(ww[i])) {
						finite++
					}
					bothNaN := math.IsNaN(float64(gw[i])) && math.IsNaN(float64(ww[i])) // a fully masked row
					if d := math.Abs(float64(gw[i] - ww[i])); !(d <= 1e-6) && !bothNaN {
						t.Fatalf("%s: fused weight %d is %v, unfused %v", c.Weights, i, gw[i], ww[i])
					}
				}
				if finite < len(ww)/2 {
					t.Errorf("%s: only %d of %d weights are numbers", c.Weights, finite, len(ww))
				}
			}
		})
	}
}
