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

// qkvInputs declares inputs q [b, h, sq, d], k and v [b, h, sk, d], then
// extra.
func qkvInputs(b, h, sq, sk, d int, extra ...*ir.ValueInfo) []*ir.ValueInfo {
	return append([]*ir.ValueInfo{vi("q", ir.Float, b, h, sq, d), vi("k", ir.Float, b, h, sk, d), vi("v", ir.Float, b, h, sk, d)}, extra...)
}

// addedMaskChain builds an attention over qkvInputs adding the last mask
// node's output (or the constant "a" when there is none) to the scores
// q·kᵀ ("s0", into "s1"), with floor then raising them to the constant
// "floor" (into "s2"), before the Softmax and the product with v ("y").
func addedMaskChain(floor bool, mask ...*ir.Node) []*ir.Node {
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 1, 3, 2}}
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	am, scores := "a", "s1"
	if len(mask) > 0 {
		am = mask[len(mask)-1].Outputs[0]
	}
	out := []*ir.Node{node("Transpose", []string{"k"}, []string{"kt"}, perm), node("MatMul", []string{"q", "kt"}, []string{"s0"})}
	out = append(append(out, mask...), node("Add", []string{"s0", am}, []string{"s1"}))
	if floor {
		out, scores = append(out, node("Max", []string{"s1", "floor"}, []string{"s2"})), "s2"
	}
	return append(out, node("Softmax", []string{scores}, []string{"p"}, axis), node("MatMul", []string{"p", "v"}, []string{"y"}))
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
	inputs := func(extra ...*ir.ValueInfo) []*ir.ValueInfo { return qkvInputs(b, h, sq, sk, d, extra...) }
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
	checkCausalCases(t, r, []causalCase{
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
		{name: "a finfo.min fill with a left-padding key mask: rows that lose every key take the mean of V",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "fill": sc(-math.MaxFloat32)},
				nodes: chain(false, "fill", node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": leftPadding(sk, 0, 5)},
			ops:   "Transpose MatMul Or Where Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 masked_rows_uniform=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "a finfo.min fill with offset -2: rows with no key take the mean of V",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, -2, true), "fill": sc(-math.MaxFloat32)},
				nodes: chain(false, "fill", node("Identity", []string{"a"}, []string{"c"}))},
			ops: "Transpose MatMul Where Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=-2 masked_rows_uniform=1"},
		{name: "a finfo.min fill alone: the causal cut",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "fill": sc(-math.MaxFloat32)},
				nodes: chain(false, "fill", node("Identity", []string{"a"}, []string{"c"}))},
			ops: "Transpose MatMul Where Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2"},
		{name: "a finfo.min fill that overflows to -inf when scaled: stays the mask",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "fill": sc(-math.MaxFloat32), "c4": sc(4)},
				nodes: func() []*ir.Node {
					n := chain(false, "fill", node("Or", []string{"a", "m"}, []string{"c"}))
					n[4].Inputs[0] = "s2" // the Softmax reads the scaled scores
					return append(n[:4:4], append([]*ir.Node{node("Mul", []string{"s1", "c4"}, []string{"s2"})}, n[4:]...)...)
				}()},
			feeds: map[string]*ir.Tensor{"m": leftPadding(sk, 0, 5)},
			ops:   "Transpose MatMul Where Mul Softmax MatMul", attrs: "scale=4 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "a finite fill",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalBool(sq, sk, 2, true), "fill": sc(-1e9)},
				nodes: chain(false, "fill", node("Or", []string{"a", "m"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Where Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-1e+09"},
	})
}

// causalCase is a synthesized attention whose mask the fusion may split.
type causalCase struct {
	name     string
	syn      synth
	feeds    map[string]*ir.Tensor
	ops      string // replaced op types
	absorbed string // absorbed op types
	attrs    string // the fused node's attributes (fusedAttrs)
}

// checkCausalCases runs each case fused and unfused, compares output y,
// and checks the one fusion's replaced and absorbed nodes and attributes.
func checkCausalCases(t *testing.T, r *rand.Rand, cases []causalCase) {
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

// leftPadding is a key mask [len(pads), 1, 1, sk], true (padding) on the
// first pads[b] keys of batch b: left padding, as batched generation
// pads its prompts.
func leftPadding(sk int, pads ...int) *ir.Tensor {
	m := ir.NewTensor(ir.Bool, []int{len(pads), 1, 1, sk})
	for b, n := range pads {
		for j := 0; j < n; j++ {
			m.Bools()[b*sk+j] = true
		}
	}
	return m
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

// causalFloat is an additive mask [sq, sk]: 0 where key j is at most
// query i's diagonal (j ≤ i + off), fill past it.
func causalFloat(sq, sk, off int, fill float32) *ir.Tensor {
	m := ir.NewTensor(ir.Float, []int{sq, sk})
	for i := 0; i < sq; i++ {
		for j := i + off + 1; j < sk; j++ {
			if j >= 0 {
				m.Float32s()[i*sk+j] = fill
			}
		}
	}
	return m
}

// TestFuseCausalAdditiveSplit checks which additive masks the fusion puts
// on the causal cut (fuse_causal.go), and that the fused model computes
// what the unfused one does: a 0/-inf or finfo.min causal constant,
// nn.MultiheadAttention's merge Where(key mask, -inf, causal) and Add of a
// causal constant and a per-key mask, through Casts and scalings, read
// through the Slice of a buffer too large to fold; and the masks that
// must stay as they are (fills above -2^127, a causal part whose finite
// fill meets a key mask, rows with no key, masks varying per query).
func TestFuseCausalAdditiveSplit(t *testing.T) {
	r := rand.New(rand.NewSource(17))
	const b, h, sq, sk, d = 2, 3, 7, 9, 4 // sk = sq + 2: a causal offset of 2
	negInf, fmin := float32(math.Inf(-1)), float32(-math.MaxFloat32)
	inputs := func(extra ...*ir.ValueInfo) []*ir.ValueInfo { return qkvInputs(b, h, sq, sk, d, extra...) }
	chain := func(mask ...*ir.Node) []*ir.Node { return addedMaskChain(false, mask...) }
	keyMask := func(hide bool) *ir.Tensor { // [b, 1, 1, sk], key 0 never hidden
		m := ir.NewTensor(ir.Bool, []int{b, 1, 1, sk})
		for i := range m.Bools() {
			m.Bools()[i] = (r.Intn(3) == 0 && i%sk != 0) == hide
		}
		return m
	}
	keyBias := randT(r, b, 1, 1, sk)
	// padFmin is (1 - keep)·finfo.min for batch 0's first 6 keys padded.
	padFmin := ir.NewTensor(ir.Float, []int{b, 1, 1, sk})
	for j := 0; j < 6; j++ {
		padFmin.Float32s()[j] = fmin
	}
	// addedTwice makes chain's one Add of the mask two: scores + first,
	// then + second, each an Add of its own.
	addedTwice := func(nodes []*ir.Node, first, second string) []*ir.Node {
		out := []*ir.Node{}
		for _, n := range nodes {
			if n.OpType == "Add" {
				out = append(out, node("Add", []string{"s0", first}, []string{"s01"}), node("Add", []string{"s01", second}, []string{"s1"}))
				continue
			}
			out = append(out, n)
		}
		return out
	}
	big := ir.NewTensor(ir.Float, []int{2100, 2100}) // over maxFoldElements: its Slice stays a step
	for i := 0; i < 2100; i++ {
		for j := i + 1; j < 2100; j++ {
			big.Float32s()[i*2100+j] = negInf
		}
	}
	nearly := causalFloat(sq, sk, 2, negInf)
	nearly.Float32s()[3*sk+1] = negInf // one hidden key below the diagonal
	mkey := vi("m", ir.Bool, b, 1, 1, sk)
	checkCausalCases(t, r, []causalCase{
		{name: "finfo.min causal constant (LLaMA after a KV cache of 2)",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin)}, nodes: chain()},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2"},
		{name: "Where(key mask, -inf, causal)·1 (nn.TransformerDecoderLayer)",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, negInf), "ninf": sc(negInf), "one": sc(1)},
				nodes: chain(node("Where", []string{"m", "ninf", "a"}, []string{"w"}), node("Mul", []string{"w", "one"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Where Mul Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "Where(keep mask, causal, -inf) through a Cast, then a scale",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, negInf), "ninf": sc(negInf), "c8": sc(8)},
				nodes: func() []*ir.Node {
					n := chain(node("Where", []string{"m", "a", "ninf"}, []string{"w"}), node("Cast", []string{"w"}, []string{"c"}, castTo(ir.Float)))
					n[5].Inputs[0] = "s2" // the Softmax reads the scaled scores
					return append(n[:5:5], append([]*ir.Node{node("Div", []string{"s1", "c8"}, []string{"s2"})}, n[5:]...)...)
				}()},
			feeds: map[string]*ir.Tensor{"m": keyMask(false)},
			ops:   "Transpose MatMul Where Cast Add Div Softmax MatMul", attrs: "scale=0.125 causal=1 causal_offset=2 mask_kind=bool_false_masks mask_fill=-Inf"},
		{name: "Add(causal, per-key additive mask)",
			syn: synth{inputs: inputs(vi("kb", ir.Float, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, negInf)},
				nodes: chain(node("Add", []string{"a", "kb"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"kb": keyBias},
			ops:   "Transpose MatMul Add Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 mask_kind=additive mask_scale=1"},
		{name: "Add(Where(key mask, -inf, 0), causal): the key mask as bool",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, negInf), "ninf": sc(negInf), "zero": sc(0)},
				nodes: chain(node("Where", []string{"m", "ninf", "zero"}, []string{"kb"}), node("Add", []string{"kb", "a"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Where Add Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "Where(key mask, -inf, Slice of a causal buffer too large to fold): offset -1, query 0 sees no key (NaN, as unfused)",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"buf": big, "st": int64s(0, 1), "en": int64s(sq, 1+sk), "ax": int64s(0, 1), "ninf": sc(negInf)},
				nodes: chain(node("Slice", []string{"buf", "st", "en", "ax"}, []string{"a"}), node("Where", []string{"m", "ninf", "a"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Where Add Softmax MatMul", absorbed: "Slice", attrs: "scale=1 causal=1 causal_offset=-1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "Where(left padding, finfo.min, finfo.min causal) (transformers' LLaMA masked_fill): rows that lose every key take the mean of V",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin), "fmin": sc(fmin)},
				nodes: chain(node("Where", []string{"m", "fmin", "a"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": leftPadding(sk, 6, 0)},
			ops:   "Transpose MatMul Where Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 masked_rows_uniform=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "Where(keep mask, finfo.min causal, finfo.min), every key of batch 1 padded",
			syn: synth{inputs: inputs(vi("pad", ir.Bool, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin), "fmin": sc(fmin)},
				nodes: chain(node("Not", []string{"pad"}, []string{"m"}), node("Where", []string{"m", "a", "fmin"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"pad": leftPadding(sk, 3, sk)},
			ops:   "Transpose MatMul Where Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 masked_rows_uniform=1 mask_kind=bool_false_masks mask_fill=-Inf"},
		{name: "finfo.min causal constant with rows of no key (offset -2): they take the mean of V",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, -2, fmin)}, nodes: chain()},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=-2 masked_rows_uniform=1"},
		// Masks that are not split.
		{name: "finfo.min causal constant times 0.25 (folded): a fill above -2^127",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a0": causalFloat(sq, sk, 2, fmin), "c": sc(0.25)},
				nodes: chain(node("Mul", []string{"a0", "c"}, []string{"a"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "seed 003's -1e9 as a causal constant",
			syn: synth{inputs: inputs(), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, -1e9)}, nodes: chain()},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "Where(key mask, -inf, finfo.min causal): a padded row could lose every key",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin), "ninf": sc(negInf)},
				nodes: chain(node("Where", []string{"m", "ninf", "a"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "Where(left padding, finfo.min, -inf causal): padded keys past the diagonal get finfo.min, not -inf",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, negInf), "fmin": sc(fmin)},
				nodes: chain(node("Where", []string{"m", "fmin", "a"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": leftPadding(sk, 6, 0)},
			ops:   "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "Where(left padding, -1e9, -1e9 causal): a fill above -2^127",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, -1e9), "f": sc(-1e9)},
				nodes: chain(node("Where", []string{"m", "f", "a"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": leftPadding(sk, 6, 0)},
			ops:   "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		// transformers 4.30-4.35's LLaMA: the cut, checked per row (the
		// padded rows, where finfo.min twice is -inf, computed again).
		{name: "Add(finfo.min causal, (1 - keep)·finfo.min): the checked cut",
			syn: synth{inputs: inputs(vi("kb", ir.Float, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin)},
				nodes: chain(node("Add", []string{"a", "kb"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"kb": padFmin},
			ops:   "Transpose MatMul Add Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 causal_fill=-3.4028235e+38 mask_kind=additive mask_scale=1"},
		// CLIP's text encoder: the causal constant and the padding mask
		// each added to the scores by its own Add.
		{name: "finfo.min causal constant added, then (1 - keep)·finfo.min added (CLIP): the checked cut",
			syn: synth{inputs: inputs(vi("kb", ir.Float, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin)},
				nodes: addedTwice(chain(), "a", "kb")},
			feeds: map[string]*ir.Tensor{"kb": padFmin},
			ops:   "Transpose MatMul Add Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 causal_fill=-3.4028235e+38 mask_kind=additive mask_scale=1"},
		{name: "-inf causal constant added, then a per-key bias added: the exact cut",
			syn: synth{inputs: inputs(vi("kb", ir.Float, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, negInf)},
				nodes: addedTwice(chain(), "a", "kb")},
			feeds: map[string]*ir.Tensor{"kb": keyBias},
			ops:   "Transpose MatMul Add Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 mask_kind=additive mask_scale=1"},
		// s + -1e4 is not -1e4: a row computed again at the fill would not
		// be the export's (TestCausalCutFills).
		{name: "-1e4 causal constant added, then a bias varying per query added: not split",
			syn: synth{inputs: inputs(vi("kb", ir.Float, b, 1, sq, sk)), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, -1e4)},
				nodes: addedTwice(chain(), "a", "kb")},
			ops: "Transpose MatMul Add Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1 bias_scale=1"},
		{name: "the padding added first, then the causal constant: not split",
			syn: synth{inputs: inputs(vi("kb", ir.Float, b, 1, 1, sk)), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, fmin)},
				nodes: addedTwice(chain(), "kb", "a")},
			feeds: map[string]*ir.Tensor{"kb": keyBias},
			ops:   "Transpose MatMul Add Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1 bias_scale=1"},
		{name: "Where(key mask, -inf, a constant that is not quite causal)",
			syn: synth{inputs: inputs(mkey), inits: map[string]*ir.Tensor{"a": nearly, "ninf": sc(negInf)},
				nodes: chain(node("Where", []string{"m", "ninf", "a"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": keyMask(true)},
			ops:   "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "Where(a mask varying per query, -inf, causal)",
			syn: synth{inputs: inputs(vi("m", ir.Bool, b, 1, sq, sk)), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, negInf), "ninf": sc(negInf)},
				nodes: chain(node("Where", []string{"m", "ninf", "a"}, []string{"c"}))},
			feeds: map[string]*ir.Tensor{"m": randBoolsKeyZeroKept(r, b, 1, sq, sk)},
			ops:   "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "Add(causal, an additive mask varying per query)",
			syn: synth{inputs: inputs(vi("kb", ir.Float, b, 1, sq, sk)), inits: map[string]*ir.Tensor{"a": causalFloat(sq, sk, 2, negInf)},
				nodes: chain(node("Add", []string{"a", "kb"}, []string{"c"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
	})
}

// TestCausalCutFills checks, with numbers, the fills fuse_causal.go puts
// on the causal cut and those it refuses. On scores near -2·10^4 (every
// q·k = 4·100·(-50)) GPT-2's -1e4 fill gives the hidden keys all the
// weight, so a cut would change the result: it stays the mask. finfo.min
// on the same scores, and on scores of ±10^6, is exact: it is cut, and
// the fused result matches the unfused one. With a key mask merged with
// -inf onto a finfo.min causal constant (mixed fills), a query whose only
// causal key is padded gets uniform weights over its padded keys from the
// export, which no cut gives: that form stays unsplit. Merged with
// finfo.min (transformers' masked_fill), the query sees finfo.min on
// every key: it is cut, with masked_rows_uniform, and matches.
func TestCausalCutFills(t *testing.T) {
	const b, h, s, d = 1, 2, 6, 4
	negInf, fmin := float32(math.Inf(-1)), float32(-math.MaxFloat32)
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 1, 3, 2}}
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	full := func(v float32, dims ...int) *ir.Tensor {
		x := ir.NewTensor(ir.Float, dims)
		for i := range x.Float32s() {
			x.Float32s()[i] = v
		}
		return x
	}
	r := rand.New(rand.NewSource(5))
	spread := randT(r, b, h, s, d)
	for i := range spread.Float32s() {
		spread.Float32s()[i] *= 1000 // scores of ±10^6
	}
	far := map[string]*ir.Tensor{"q": full(100, b, h, s, d), "k": full(-50, b, h, s, d), "v": randT(r, b, h, s, d)}
	wide := map[string]*ir.Tensor{"q": spread, "k": randT(r, b, h, s, d), "v": far["v"]}
	// model: Where(keep, scores, fill) with keep a causal constant, or
	// scores + Where(m, keyFill, causal constant of fill) with a key mask
	// m (keyFill -inf in model).
	var modelKeyFill func(fill float32, keyMask bool, keyFill float32) *ir.Model
	model := func(fill float32, keyMask bool) *ir.Model {
		return modelKeyFill(fill, keyMask, negInf)
	}
	modelKeyFill = func(fill float32, keyMask bool, keyFill float32) *ir.Model {
		syn := synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, h, s, d), vi("v", ir.Float, b, h, s, d)},
			inits:   map[string]*ir.Tensor{"keep": causalBool(s, s, 0, false), "fill": sc(fill), "a": causalFloat(s, s, 0, fill), "ninf": sc(keyFill)},
			nodes:   []*ir.Node{node("Transpose", []string{"k"}, []string{"kt"}, perm), node("MatMul", []string{"q", "kt"}, []string{"s0"})},
			outputs: []string{"y"}}
		if keyMask {
			syn.inputs = append(syn.inputs, vi("m", ir.Bool, b, 1, 1, s))
			syn.nodes = append(syn.nodes, node("Where", []string{"m", "ninf", "a"}, []string{"c"}), node("Add", []string{"s0", "c"}, []string{"s1"}))
		} else {
			syn.nodes = append(syn.nodes, node("Where", []string{"keep", "s0", "fill"}, []string{"s1"}))
		}
		syn.nodes = append(syn.nodes, node("Softmax", []string{"s1"}, []string{"p"}, axis), node("MatMul", []string{"p", "v"}, []string{"y"}))
		return syn.model()
	}
	run := func(m *ir.Model, in map[string]*ir.Tensor) (y *ir.Tensor, causal bool) {
		fused, unfused, fs := runAll(t, m, in)
		sameOutputs(t, fused["y"], unfused["y"])
		if len(fs) != 1 {
			t.Fatalf("%d fusions, want 1", len(fs))
		}
		c, _ := fs[0].Node.AttrInt("causal", 0)
		return unfused["y"], c == 1
	}
	cut, _ := run(model(negInf, false), far)
	// -1e4: cut with causal_fill, each row checked. On scores of -2e4
	// every row fails the check and is computed at the fill (run compares
	// fused and unfused), which differs from the -inf cut.
	if y, causal := run(model(-1e4, false), far); !causal {
		t.Errorf("a -1e4 fill is not cut")
	} else if maxDiff(y, cut) < 1 {
		t.Errorf("-1e4 and -inf agree (%g) on scores of -2e4: the test shows nothing", maxDiff(y, cut))
	}
	// GPT-2's order: Where(keep, S, -1e4), then + an additive key mask of
	// 0 and -1e4 (padding). With key 0 padded, query 0 keeps only a padded
	// key and fails the check; the other rows pass it.
	gpt2 := synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, h, s, d), vi("v", ir.Float, b, h, s, d), vi("pad", ir.Float, b, 1, 1, s)},
		inits: map[string]*ir.Tensor{"keep": causalBool(s, s, 0, false), "fill": sc(-1e4)},
		nodes: []*ir.Node{node("Transpose", []string{"k"}, []string{"kt"}, perm), node("MatMul", []string{"q", "kt"}, []string{"s0"}),
			node("Where", []string{"keep", "s0", "fill"}, []string{"s1"}), node("Add", []string{"s1", "pad"}, []string{"s2"}),
			node("Softmax", []string{"s2"}, []string{"p"}, axis), node("MatMul", []string{"p", "v"}, []string{"y"})},
		outputs: []string{"y"}}.model()
	padded := full(0, b, 1, 1, s)
	padded.Float32s()[0] = -1e4
	for _, pad := range []*ir.Tensor{full(0, b, 1, 1, s), padded} {
		in := map[string]*ir.Tensor{"q": randT(r, b, h, s, d), "k": randT(r, b, h, s, d), "v": far["v"], "pad": pad}
		fused, unfused, fs := runAll(t, gpt2, in)
		sameOutputs(t, fused["y"], unfused["y"])
		if c, _ := fs[0].Node.AttrInt("causal", 0); c != 1 || fs[0].Node.Input(3) != "pad" {
			t.Errorf("GPT-2's chain: causal %d, mask %q; want the cut and the padding as the mask", c, fs[0].Node.Input(3))
		}
	}
	// An additive -1e4 causal constant, then an added key mask, each by an
	// Add of its own: on scores of -2e4 every row would fail a check, and
	// computing it again with the hidden scores at -1e4 is not the export's
	// s - 1e4. It stays the mask (run compares fused and unfused).
	added := synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, h, s, d), vi("v", ir.Float, b, h, s, d), vi("pad", ir.Float, b, 1, 1, s)},
		inits: map[string]*ir.Tensor{"a": causalFloat(s, s, 0, -1e4)},
		nodes: []*ir.Node{node("Transpose", []string{"k"}, []string{"kt"}, perm), node("MatMul", []string{"q", "kt"}, []string{"s0"}),
			node("Add", []string{"s0", "a"}, []string{"s1"}), node("Add", []string{"s1", "pad"}, []string{"s2"}),
			node("Softmax", []string{"s2"}, []string{"p"}, axis), node("MatMul", []string{"p", "v"}, []string{"y"})},
		outputs: []string{"y"}}.model()
	if _, causal := run(added, map[string]*ir.Tensor{"q": far["q"], "k": far["k"], "v": far["v"], "pad": full(0, b, 1, 1, s)}); causal {
		t.Errorf("an added -1e4 causal constant beside an added mask is cut")
	}
	// finfo.min: exact, cut.
	for _, in := range []map[string]*ir.Tensor{far, wide} {
		y, causal := run(model(fmin, false), in)
		if !causal {
			t.Errorf("a finfo.min fill is not cut")
		}
		ref, _ := run(model(negInf, false), in)
		sameOutputs(t, y, ref)
	}
	// finfo.min with a key mask hiding key 0: query 0 keeps no key.
	pad := ir.NewTensor(ir.Bool, []int{b, 1, 1, s})
	pad.Bools()[0] = true
	in := map[string]*ir.Tensor{"q": spread, "k": far["v"], "v": far["v"], "m": pad}
	y, causal := run(model(fmin, true), in)
	if causal {
		t.Errorf("finfo.min with a key mask is cut")
	}
	ninf, _ := run(model(negInf, true), in)
	if g, w := y.Float32s()[0], ninf.Float32s()[0]; math.IsNaN(float64(g)) || !math.IsNaN(float64(w)) {
		t.Errorf("query 0 with no key: finfo.min gives %g, -inf gives %g; want a number and NaN", g, w)
	}
	// finfo.min for the key mask too: cut, query 0 the mean of V.
	y, causal = run(modelKeyFill(fmin, true, fmin), in)
	if !causal {
		t.Errorf("finfo.min with a finfo.min key mask is not cut")
	}
	var mean float64
	for j := 0; j < s; j++ {
		mean += float64(far["v"].Float32s()[j*d]) / s
	}
	if g := y.Float32s()[0]; math.Abs(float64(g)-mean) > 1e-6 {
		t.Errorf("query 0 with no key: %g, want the mean of V's first column %g", g, mean)
	}
}

// maxDiff is the largest absolute difference between two tensors' elements.
func maxDiff(a, b *ir.Tensor) float64 {
	m := 0.0
	for i, x := range a.Float32s() {
		m = max(m, math.Abs(float64(x-b.Float32s()[i])))
	}
	return m
}
