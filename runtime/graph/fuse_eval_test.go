package graph

import (
	"maps"
	"math/rand"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/runtime/budget"
)

// longSeq is a sequence length whose [seq, seq] mask has more than
// maxFoldElements elements: folding leaves it to the plan's steps; at
// shortSeq the mask folds.
const longSeq, shortSeq = 2100, 64

// keepInputs is zeroInputs with every attention_mask input all ones (every
// key kept).
func keepInputs(t *testing.T, g *ir.Graph, sizes map[string]int) map[string]*ir.Tensor {
	in := zeroInputs(t, g, sizes)
	if m, ok := in["attention_mask"]; ok {
		for i := range m.Int64s() {
			m.Int64s()[i] = 1
		}
	}
	return in
}

// TestLongCausalMaskCut checks the bundled exports whose causal mask is
// built from the sequence length (a Trilu of a ConstantOfShape, a
// comparison of Ranges, a generated square mask): at longSeq tokens, where
// the mask is too large to fold, the plan still takes the causal cut
// (evalShapeOnly, fuse_eval.go) with the same attributes as at a short
// length and runs the same steps (none of the mask's).
func TestLongCausalMaskCut(t *testing.T) {
	for _, c := range []struct {
		model string
		// same: the plan at longSeq is the one at shortSeq. BLOOM's
		// differs: at shortSeq its attention_mask is a plan key, and the
		// ALiBi and padding terms computed from it fold.
		same bool
	}{
		{"bloom_attention", false},
		{"falcon_mqa_attention", true},
		{"llama_attention_opset17", true},
		{"llama_padded_attention", true},
		{"llama_padded_attention_add", true},
		{"s001_decoder_self_attention", true},
		{"s004_multi_head_bmm_causal", true},
		{"torch_decoder_layer", true},
	} {
		model := c.model
		t.Run(model, func(t *testing.T) {
			m, p := compileModel(t, model)
			dims := maps.Clone(modelDims)
			dims["batch"], dims["seq"] = 1, shortSeq
			short := keepInputs(t, m.Graph, dims)
			dims["seq"] = longSeq
			long := keepInputs(t, m.Graph, dims)
			if g, w := stepOpTypes(t, p, long), stepOpTypes(t, p, short); c.same && g != w {
				t.Errorf("steps at seq %d:\n%s\nwant those at seq %d:\n%s", longSeq, g, shortSeq, w)
			}
			shortFs, err := p.Fusions(short)
			if err != nil {
				t.Fatal(err)
			}
			longFs, err := p.Fusions(long)
			if err != nil {
				t.Fatal(err)
			}
			shortFs, longFs = attentionFusions(shortFs), attentionFusions(longFs)
			if len(longFs) != len(shortFs) || len(longFs) == 0 {
				t.Fatalf("%d attention fusions at seq %d, %d at seq %d", len(longFs), longSeq, len(shortFs), shortSeq)
			}
			for i := range longFs {
				if g, w := fusedAttrs(longFs[i].Node), fusedAttrs(shortFs[i].Node); c.same && g != w {
					t.Errorf("fusion %d: attributes %s, want %s", i, g, w)
				}
			}
			if g := fusedAttrs(longFs[0].Node); !containsWord(g, "causal=1") {
				t.Errorf("first fusion's attributes %s: no causal cut", g)
			}
		})
	}
}

// TestLongCausalMaskValues runs exports with a length-built causal mask
// (Mistral's: a sliding window) at longSeq tokens fused (the cut from the
// evaluated mask; the window's bool mask besides) and unfused (the mask
// computed by its steps) and compares the outputs; and checks that planning
// returns what the evaluation reserved to the budget.
func TestLongCausalMaskValues(t *testing.T) {
	r := rand.New(rand.NewSource(21))
	for _, c := range []struct {
		model string
		masks int64 // [seq, seq] bool masks the plan holds: the window's
	}{{"falcon_mqa_attention", 0}, {"s004_multi_head_bmm_causal", 0}, {"mistral_sliding_window_attention", 1}} {
		model := c.model
		t.Run(model, func(t *testing.T) {
			m, _ := compileModel(t, model)
			x := m.Graph.Inputs[0].Type.Shape
			in := map[string]*ir.Tensor{"x": randT(r, 1, longSeq, int(x[len(x)-1].Value))}
			fused, unfused, fs := runBoth(t, m, in)
			sameOutputs(t, fused, unfused)
			if g := fusedAttrs(attentionFusions(fs)[0].Node); !containsWord(g, "causal=1") {
				t.Errorf("attributes %s: no causal cut", g)
			}
			b := budget.New(1 << 30)
			p, err := Compile(m, Options{Threads: 2, Budget: b})
			if err != nil {
				t.Fatal(err)
			}
			before := b.Used()
			if _, err := p.Fusions(in); err != nil {
				t.Fatal(err)
			}
			// The plan holds what it folded (small) and the bool masks it
			// made (longSeq² bytes each); the evaluated mask (longSeq²
			// floats) and its steps' tensors are not among it.
			if grown := b.Used() - before; grown >= (c.masks+1)*longSeq*longSeq {
				t.Errorf("planning kept %d bytes of the budget, want less than %d", grown, (c.masks+1)*longSeq*longSeq)
			}
		})
	}
}

// containsWord reports whether space-separated list s has word w.
func containsWord(s, w string) bool { return slices.Contains(strings.Fields(s), w) }

// TestEvalShapeOnlyLeaves checks which large tensors of an unfused plan at
// longSeq tokens evalShapeOnly computes: Falcon's causal mask (a Trilu of
// a ConstantOfShape, then a Cast: from the length alone) and T5's
// relative-position buckets (comparisons and sums of Ranges), but not T5's
// position bias, gathered from a learned float table, nor the bias plus the
// padding mask, a graph input.
func TestEvalShapeOnlyLeaves(t *testing.T) {
	for _, c := range []struct {
		model string
		want  map[string]bool // tensor → evaluated
	}{
		{"falcon_mqa_attention", map[string]bool{"/ConstantOfShape_output_0": true, "/Trilu_output_0": true, "/Cast_output_0": true}},
		{"t5_attention", map[string]bool{"/Less_output_0": true, "/Add_2_output_0": true,
			"/relative_attention_bias/Gather_output_0": false, "/Add_3_output_0": false, "/Add_4_output_0": false}},
	} {
		t.Run(c.model, func(t *testing.T) {
			m, err := onnx.Load(filepath.Join("../../models", c.model, "model.onnx"), onnx.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := Compile(m, Options{Threads: 2, NoFuse: true})
			if err != nil {
				t.Fatal(err)
			}
			dims := maps.Clone(modelDims)
			dims["batch"], dims["seq"] = 1, longSeq
			pl, err := p.planFor(keepInputs(t, m.Graph, dims))
			if err != nil {
				t.Fatal(err)
			}
			defer p.donePlan(pl)
			f := newFuser(p, pl, pl.types)
			defer pl.releaseEvaluated(p.opts.Budget)
			for name, want := range c.want {
				if _, ok := f.producer[name]; !ok {
					t.Fatalf("%s: no step computes it", name)
				}
				if got := f.evalShapeOnly(name) != nil; got != want {
					t.Errorf("%s: evaluated %v, want %v", name, got, want)
				}
			}
		})
	}
}
