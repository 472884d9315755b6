package graph

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestFuseFlooredSplit checks which floored masks the fusion puts on the
// causal cut (fuse_floored.go), and that the fused model computes what the
// unfused one does, rows that see no key included: OPT's Max(S + Add(A,
// P), finfo.min) with P a Where of the padding (per key, or expanded to
// the scores' shape first), a causal constant alone, a mask the plan
// folded; and the floors that must stay (above -2^127, or above a fill).
func TestFuseFlooredSplit(t *testing.T) {
	r := rand.New(rand.NewSource(29))
	const b, h, sq, sk, d = 2, 3, 7, 9, 4 // sk = sq + 2: a causal offset of 2
	negInf, fmin := float32(math.Inf(-1)), float32(-math.MaxFloat32)
	inputs := func(extra ...*ir.ValueInfo) []*ir.ValueInfo { return qkvInputs(b, h, sq, sk, d, extra...) }
	chain := func(mask ...*ir.Node) []*ir.Node { return addedMaskChain(true, mask...) }
	// Batch 0's first 6 keys are padding: with the offset of 2, its
	// queries 0 to 3 see no key.
	pad := leftPadding(sk, 6, 1)
	mkey := vi("m", ir.Bool, b, 1, 1, sk)
	// folded is OPT's [b, 1, sq, sk] mask as the plan folds it when the
	// padding keys the plan: 0 kept, finfo.min where one term hides, -inf
	// where both do.
	folded := ir.NewTensor(ir.Float, []int{b, 1, sq, sk})
	for bb := 0; bb < b; bb++ {
		for i := 0; i < sq; i++ {
			for j := 0; j < sk; j++ {
				v := float32(0)
				if j > i+2 {
					v += fmin
				}
				if pad.Bools()[bb*sk+j] {
					v += fmin
				}
				folded.Float32s()[(bb*sq+i)*sk+j] = v
			}
		}
	}
	shape := func(dims ...int64) *ir.Tensor { return int64s(dims...) }
	const flooredOps = "Transpose MatMul Where Add Add Max Softmax MatMul"
	checkCausalCases(t, r, []causalCase{
		{name: "Add(causal, Where(padding, finfo.min, 0)) floored at finfo.min (OPT)",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin), "fmin": sc(fmin), "zero": sc(0), "floor": sc(fmin)},
				nodes: chain(node("Where", []string{"m", "fmin", "zero"}, []string{"pm"}), node("Add", []string{"a", "pm"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": pad},
			ops:   flooredOps, attrs: "scale=1 causal=1 causal_offset=2 masked_rows_uniform=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "the padding expanded to the scores' shape before its Where",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin), "fmin": sc(fmin), "zero": sc(0), "floor": sc(fmin), "shape": shape(b, 1, sq, sk)},
				nodes: chain(node("Expand", []string{"m", "shape"}, []string{"mx"}), node("Where", []string{"mx", "fmin", "zero"}, []string{"pm"}),
					node("Add", []string{"pm", "a"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": pad},
			ops:   flooredOps, absorbed: "Expand", attrs: "scale=1 causal=1 causal_offset=2 masked_rows_uniform=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "a causal constant alone, its first query seeing no key",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, -1, fmin), "floor": sc(fmin)}, nodes: chain()},
			ops: "Transpose MatMul Add Max Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=-1 masked_rows_uniform=1"},
		{name: "a mask the plan folded, of 0, finfo.min and -inf",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a": folded, "floor": sc(fmin)}, nodes: chain()},
			ops: "Transpose MatMul Add Max Softmax MatMul", attrs: "scale=1 masked_rows_uniform=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		// Floors that stay.
		{name: "a floor above -2^127: the mask stays a value",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin), "fmin": sc(fmin), "zero": sc(0), "floor": sc(-1e30)},
				nodes: chain(node("Where", []string{"m", "fmin", "zero"}, []string{"pm"}), node("Add", []string{"a", "pm"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": pad},
			ops:   "Transpose MatMul Add Max Softmax MatMul", attrs: "scale=1 scores_min=-1e+30 mask_kind=additive mask_scale=1"},
		{name: "a fill above the floor: hidden scores are not all one value",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin/2), "fmin": sc(fmin), "zero": sc(0), "floor": sc(fmin)},
				nodes: chain(node("Where", []string{"m", "fmin", "zero"}, []string{"pm"}), node("Add", []string{"a", "pm"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": pad},
			ops:   "Transpose MatMul Add Max Softmax MatMul", attrs: "scale=1 scores_min=-3.4028235e+38 mask_kind=additive mask_scale=1"},
		{name: "a -inf causal constant: the floor makes its hidden scores finfo.min",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, -1, negInf), "floor": sc(fmin)}, nodes: chain()},
			ops: "Transpose MatMul Add Max Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=-1 masked_rows_uniform=1"},
	})
}

// TestOPTAttentionFloored runs models/opt_attention (transformers' OPT
// attention with OPTDecoder's mask) at a size whose padding the plan
// computes (more attention_mask elements than plans are keyed by), fused
// and unfused, with no padding, left padding (a prompt's first queries
// see only padding) and right padding: the floored mask is the causal cut
// and the padding computed before its broadcast.
func TestOPTAttentionFloored(t *testing.T) {
	const b, s = 2, 40
	m, _ := compileModel(t, "opt_attention")
	r := rand.New(rand.NewSource(31))
	mask := func(pads func(bb, j int) bool) *ir.Tensor {
		am := ir.NewTensor(ir.Int64, []int{b, s})
		for bb := 0; bb < b; bb++ {
			for j := 0; j < s; j++ {
				if !pads(bb, j) {
					am.Int64s()[bb*s+j] = 1
				}
			}
		}
		return am
	}
	for _, c := range []struct {
		name string
		pads func(bb, j int) bool
	}{
		{"no padding", func(bb, j int) bool { return false }},
		{"left padding", func(bb, j int) bool { return bb == 1 && j < 13 }},
		{"right padding", func(bb, j int) bool { return bb == 0 && j >= 29 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := map[string]*ir.Tensor{"x": randT(r, b, s, 32), "attention_mask": mask(c.pads)}
			fused, unfused, fs := runAll(t, m, in)
			sameOutputs(t, fused["y"], unfused["y"])
			fs = attentionFusions(fs)
			n := oneFusion(t, fs, "Where Add Transpose MatMul Reshape Add Max Reshape Softmax MatMul")
			if g, want := fusedAttrs(n), "causal=1 masked_rows_uniform=1 mask_kind=bool_true_masks mask_fill=-Inf"; !strings.Contains(g, want) || strings.Contains(g, "scores_min") {
				t.Errorf("attributes %s, want %s and no scores_min", g, want)
			}
			if mk := n.Input(3); !strings.HasSuffix(mk, "/narrowed") {
				t.Errorf("mask %q, want the padding computed before its broadcast", mk)
			}
		})
	}
}
