package graph

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// causalBool is a bool mask [sq, sk] equal to hide where key j is past
// query i's diagonal (j > i + off), !hide elsewhere.
func causalBool(sq, sk, off int, hide bool) *ir.Tensor {
	m := ir.NewTensor(ir.Bool, []int{sq, sk})
	for i := 0; i < sq; i++ {
		for j := 0; j < sk; j++ {
			m.Bools()[i*sk+j] = (j > i+off) == hide
		}
	}
	return m
}

// TestFuseCausalSplit checks which bool masks the fusion puts on the
// fused node's causal cut (fuse_causal.go), and that the fused model
// computes what the unfused one does: a causal constant alone, Or / And /
// Add of one with a per-key mask (through Casts, either operand order,
// read through the Slices of a buffer too large to fold), and the masks
// that must stay as they are.
func TestFuseCausalSplit(t *testing.T) {
	r := rand.New(rand.NewSource(13))
	const b, h, sq, sk, d = 2, 3, 7, 9, 4 // sk = sq + 2: a causal offset of 2
	negInf := float32(math.Inf(-1))
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 1, 3, 2}}
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	inputs := func(extra ...*ir.ValueInfo) []*ir.ValueInfo {
		return append([]*ir.ValueInfo{vi("q", ir.Float, b, h, sq, d), vi("k", ir.Float, b, h, sk, d), vi("v", ir.Float, b, h, sk, d)}, extra...)
	}
	// chain builds the attention around the given mask nodes: the last
	// one's output is the Where's condition.
	chain := func(keep bool, fill string, mask ...*ir.Node) []*ir.Node {
		cond := mask[len(mask)-1].Outputs[0]
		where := node("Where", []string{cond, fill, "s0"}, []string{"s1"})
		if keep {
			where = node("Where", []string{cond, "s0", fill}, []string{"s1"})
		}
		out := []*ir.Node{node("Transpose", []string{"k"}, []string{"kt"}, perm), node("MatMul", []string{"q", "kt"}, []string{"s0"})}
		out = append(append(out, mask...), where, node("Softmax", []string{"s1"}, []string{"p"}, axis), node("MatMul", []string{"p", "v"}, []string{"y"}))
		return out
	}
	// A per-key mask [b, 1, 1, sk] that never hides key 0.
	keyMask := func(hide bool) *ir.Tensor {
		m := ir.NewTensor(ir.Bool, []int{b, 1, 1, sk})
		for i := range m.Bools() {
			m.Bools()[i] = (r.Intn(3) == 0 && i%sk != 0) == hide
		}
		return m
	}
	big := ir.NewTensor(ir.Bool, []int{2100, 2100}) // over maxFoldElements: its Slices stay steps
	for i := 0; i < 2100; i++ {
		for j := i + 3; j < 2100; j++ {
			big.Bools()[i*2100+j] = true
		}
	}
	lower := ir.NewTensor(ir.Bool, []int{2100, 2100}) // transposed: hides j > i + 1
	for i := 0; i < 2100; i++ {
		for j := 0; j+1 < i; j++ {
			lower.Bools()[i*2100+j] = true
		}
	}
	twoOffsets := ir.NewTensor(ir.Bool, []int{2, 1, sq, sk}) // batch 1's diagonal one key further
	copy(twoOffsets.Bools(), causalBool(sq, sk, 2, true).Bools())
	copy(twoOffsets.Bools()[sq*sk:], causalBool(sq, sk, 3, true).Bools())
	nearly := causalBool(sq, sk, 2, true)
	nearly.Bools()[3*sk+1] = true // one hidden key below the diagonal
	castBool := castTo(ir.Bool)
	cases := []struct {
		name     string
		syn      synth
		feeds    map[string]*ir.Tensor
		ops      string // replaced op types
		absorbed string // absorbed op types
		attrs    string
	}{
		{name: "causal constant alone: no mask tensor",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Identity", []string{"a"}, []string{"c"}))},
			ops: "Transpose MatMul Where Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2"},
		{name: "Or(causal constant, key mask)",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Or Where Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "Or(key mask, causal constant) through Casts",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Or", []string{"m", "a"}, []string{"o"}), node("Cast", []string{"o"}, []string{"c"}, castBool))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Or Cast Where Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "Add on bool (PyTorch's bool + bool) of a causal constant and a key mask",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Add", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Add Where Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "And of keep masks",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, false), "ninf": sc(negInf)},
				nodes: chain(true, "ninf", node("And", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(false)},
			ops:   "Transpose MatMul And Where Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 mask_kind=bool_false_masks mask_fill=-Inf"},
		{name: "Or of the Slices of a causal buffer too large to fold, and a key mask",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)),
				inits: map[string]*ir.Tensor{"buf": big, "st": int64s(0, 1), "en": int64s(sq, 1+sk), "ax": int64s(0, 1), "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Slice", []string{"buf", "st", "en", "ax"}, []string{"a"}), node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Or Where Softmax MatMul", absorbed: "Slice", attrs: "scale=1 causal=1 causal_offset=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "Or of a slice of a transposed buffer (a strided view), and a key mask",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)),
				inits: map[string]*ir.Tensor{"low": lower, "st": int64s(0, 0), "en": int64s(sq, sk), "ax": int64s(0, 1), "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Transpose", []string{"low"}, []string{"up"}), node("Slice", []string{"up", "st", "en", "ax"}, []string{"a"}),
					node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Or Where Softmax MatMul", absorbed: "Transpose Slice", attrs: "scale=1 causal=1 causal_offset=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		// Masks that are not split.
		{name: "a constant that is not quite causal",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": nearly, "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Where Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "causal constant of the other polarity (keeps) in an Or",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, false), "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Where Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "batch matrices with different diagonals",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": twoOffsets, "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Where Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "a second mask that varies along the queries",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, sq, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "ninf": sc(negInf)},
				nodes: chain(false, "ninf", node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": randBoolsKeyZeroKept(r, b, 1, sq, sk)},
			ops:   "Transpose MatMul Where Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "a bias after the mask",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk), vi("bias", ir.Float, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "ninf": sc(negInf)},
				nodes: func() []*ir.Node {
					n := chain(false, "ninf", node("Or", []string{"a", "m"}, []string{"c"}))
					n[4].Inputs[0] = "s2" // the Softmax reads the biased scores
					return append(n[:4:4], append([]*ir.Node{node("Add", []string{"s1", "bias"}, []string{"s2"})}, n[4:]...)...)
				}()},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Where Add Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-Inf bias_scale=1"},
		{name: "a finite fill",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "fill": sc(-1e9)},
				nodes: chain(false, "fill", node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Where Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-1e+09"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.syn.outputs = []string{"y"}
			m := c.syn.model()
			fused, unfused, fs := runAll(t, m, synthInputs(r, m, c.feeds))
			sameOutputs(t, fused["y"], unfused["y"])
			if g := fusedAttrs(oneFusion(t, fs, c.ops)); g != c.attrs {
				t.Errorf("attributes %s, want %s", g, c.attrs)
			}
			if g := opTypes(fs[0].Absorbed); g != c.absorbed {
				t.Errorf("absorbed %q, want %q", g, c.absorbed)
			}
		})
	}
}

// randBoolsKeyZeroKept is a random bool mask true with probability 1/3,
// except at key 0 (the last axis's first element) of every row.
func randBoolsKeyZeroKept(r *rand.Rand, shape ...int) *ir.Tensor {
	m := ir.NewTensor(ir.Bool, shape)
	for i := range m.Bools() {
		m.Bools()[i] = r.Intn(3) == 0 && i%shape[len(shape)-1] != 0
	}
	return m
}
