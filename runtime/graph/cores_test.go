package graph

import (
	"path/filepath"
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
	}
	all, _ := filepath.Glob("../../models/s0*/model.onnx")
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
				if core.Weights != core.Softmax.Outputs[0] || core.Output.Inputs[0] != core.Weights {
					t.Errorf("core %s: weights %q are not the Softmax output read by P·V", core.Softmax.Label(), core.Weights)
				}
				first := core.Nodes[0]
				if first.OpType != "MatMul" || first == core.Output {
					t.Errorf("core %s: chain starts at %s (%s), want the scores MatMul", core.Softmax.Label(), first.Label(), first.OpType)
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
