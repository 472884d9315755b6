package graph

import (
	"strings"
	"testing"
)

// TestModelFusionViews checks that the fused attention of the bundled
// models reads Q, K, V through views of the projection instead of running
// the head split, and writes the head merge in place: what is left of the
// plan are the projections, the fused node and what the model computes
// besides.
func TestModelFusionViews(t *testing.T) {
	cases := []struct {
		model    string
		steps    string // op types of the plan's steps
		absorbed string // op types of the first fusion's absorbed nodes
	}{
		{"s000_multi_head", "FusedMatMul FusedAttention FusedMatMul", "Reshape Transpose Split Squeeze Squeeze Squeeze Transpose Reshape"},
		// timm's older ViT: q, k, v = qkv[0], qkv[1], qkv[2], Gathers of
		// one index, read as views like the Split above.
		{"timm_vit_attention_indexed", "FusedMatMul FusedAttention FusedMatMul", "Reshape Transpose Gather Gather Gather Transpose Reshape"},
		// Falcon: K and V by index lists (Gathers keeping the head axis).
		{"falcon_mqa_attention", "FusedMatMul FusedAttention FusedMatMul", "Reshape Slice Transpose Gather Gather Transpose Transpose Transpose Reshape"},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			m, p := compileModel(t, c.model)
			in := zeroInputs(t, m.Graph, map[string]int{"batch": 2, "seq": 5})
			pl, err := p.planFor(in)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, st := range pl.steps {
				got = append(got, st.node.OpType)
			}
			if g := strings.Join(got, " "); g != c.steps {
				t.Errorf("steps %s, want %s", g, c.steps)
			}
			var abs []string
			for _, n := range pl.fusions[0].Absorbed {
				abs = append(abs, n.OpType)
			}
			if g := strings.Join(abs, " "); g != c.absorbed {
				t.Errorf("absorbed %s, want %s", g, c.absorbed)
			}
		})
	}
}
