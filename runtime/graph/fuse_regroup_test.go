package graph

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// TestFinestBatch: the finest batch shape that every batch shape of a
// chain regroups, or none.
func TestFinestBatch(t *testing.T) {
	for _, c := range []struct {
		frames [][]int
		want   []int
		ok     bool
	}{
		{[][]int{{8, 4}, {2, 4, 4}, {8, 4}}, []int{2, 4, 4}, true}, // Swin: B_ = 8, nW = 4, H = 4
		{[][]int{{24}, {6, 4}}, []int{6, 4}, true},                 // BLOOM: B·H = 24
		{[][]int{{1, 4}, {1, 1, 4}}, []int{4}, true},               // one window of one image
		{[][]int{{6, 4}, {2, 12}}, []int{2, 3, 4}, true},           // both split
		{[][]int{{2, 3}, {3, 2}}, nil, false},                      // other matrices grouped
		{[][]int{{6}, {4}}, nil, false},                            // other counts
		{[][]int{{}, {1, 1}}, nil, true},                           // one matrix
		{[][]int{{0, 4}, {4, 0}}, nil, false},                      // empty
	} {
		got, ok := finestBatch(c.frames)
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("finestBatch(%v) = %v, %v; want %v, %v", c.frames, got, ok, c.want, c.ok)
		}
	}
}

// TestRegroupShape: a tensor broadcast to one batch shape, seen in a finer
// one.
func TestRegroupShape(t *testing.T) {
	for _, c := range []struct {
		shape, frame, fine, want []int
		ok                       bool
	}{
		{[]int{24, 1, 7}, []int{24}, []int{6, 4}, []int{6, 4, 1, 7}, true},                     // BLOOM's ALiBi
		{[]int{1, 4, 16, 16}, []int{8, 4}, []int{2, 4, 4}, []int{1, 1, 4, 16, 16}, true},       // Swin's bias
		{[]int{4, 16, 16}, []int{8, 4}, []int{2, 4, 4}, []int{4, 16, 16}, true},                // left-padded
		{[]int{1, 4, 1, 16, 16}, []int{2, 4, 4}, []int{2, 4, 4}, []int{1, 4, 1, 16, 16}, true}, // Swin's mask
		{[]int{6, 1, 7, 7}, []int{6, 4}, []int{6, 4}, []int{6, 1, 7, 7}, true},
		{[]int{8, 16, 8}, []int{8}, []int{2, 4}, []int{2, 4, 16, 8}, true},
		{[]int{7}, []int{6, 4}, []int{6, 4}, []int{7}, true}, // no batch dims
		{[]int{3, 7, 7}, []int{24}, []int{6, 4}, nil, false}, // does not broadcast
		{[]int{2, 2, 7, 7}, []int{4}, []int{2, 2}, nil, false},
		{[]int{4, 7, 7}, []int{6, 4}, []int{3, 2, 4}, []int{4, 7, 7}, true},
		{[]int{6, 1, 7, 7}, []int{6, 4}, []int{3, 2, 4}, []int{3, 2, 1, 7, 7}, true},
	} {
		got, ok := regroupShape(c.shape, c.frame, c.fine)
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("regroupShape(%v, %v, %v) = %v, %v; want %v, %v", c.shape, c.frame, c.fine, got, ok, c.want, c.ok)
		}
	}
}

// TestFuseRegroupForms covers attention chains with Reshapes that regroup
// the batch dims of the scores or of P (fuse_regroup.go), on small
// synthetic graphs run fused and unfused with every output compared: Swin's
// window mask between two views of the scores, BLOOM's heads folded into
// the batch (ALiBi added before the view, the mask after it, P viewed
// back), its Q, K, V made by Transpose + Reshape and its output merged
// back, a view of P only; and the forms that must stay unfused.
func TestFuseRegroupForms(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	const nw, imgs, h, s, d = 3, 2, 4, 5, 8 // Swin: bw = imgs·nw windows
	const bw = imgs * nw
	const b = 2 // BLOOM: batch b, h heads
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	perm := func(p ...int64) *ir.Attribute { return &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: p} }
	// swin builds Swin's chain: q·scale, k transposed, + bias [h, s, s],
	// viewed as [bw/nw, nw, h, s, s] + mask [1, nw, 1, s, s], viewed back,
	// Softmax, · v; Q, K and V as inputs [bw, h, s, d].
	swin := synth{
		inputs: []*ir.ValueInfo{vi("q", ir.Float, bw, h, s, d), vi("k", ir.Float, bw, h, s, d), vi("v", ir.Float, bw, h, s, d), vi("mask", ir.Float, nw, s, s)},
		inits: map[string]*ir.Tensor{"scale": sc(0.125), "bias": randT(r, h, s, s), "ax0": int64s(0), "ax1": int64s(1),
			"split": int64s(bw/nw, nw, h, s, s), "merge": int64s(-1, h, s, s)},
		nodes: []*ir.Node{
			node("Mul", []string{"q", "scale"}, []string{"qs"}), node("Transpose", []string{"k"}, []string{"kt"}, perm(0, 1, 3, 2)),
			node("MatMul", []string{"qs", "kt"}, []string{"s0"}), node("Add", []string{"s0", "bias"}, []string{"s1"}),
			node("Reshape", []string{"s1", "split"}, []string{"s2"}),
			node("Unsqueeze", []string{"mask", "ax1"}, []string{"m1"}), node("Unsqueeze", []string{"m1", "ax0"}, []string{"m2"}),
			node("Add", []string{"s2", "m2"}, []string{"s3"}), node("Reshape", []string{"s3", "merge"}, []string{"s4"}),
			node("Softmax", []string{"s4"}, []string{"p"}, axis), node("MatMul", []string{"p", "v"}, []string{"y"})},
	}
	// swinWeights also sums the weights, before the product with V.
	swinWeights := withOutputs(swin, "w")
	swinWeights.nodes = slices.Concat(swin.nodes[:len(swin.nodes)-1], []*ir.Node{node("ReduceSum", []string{"p"}, []string{"w"})}, swin.nodes[len(swin.nodes)-1:])
	swinMask := ir.NewTensor(ir.Float, []int{nw, s, s})
	for i := range swinMask.Float32s() {
		if r.Intn(3) == 0 && i%s != 0 {
			swinMask.Float32s()[i] = -100
		}
	}
	// bloom builds BLOOM's chain on [b·h, s, d] operands: q·kᵀ (K given
	// as [b·h, d, s]) · alpha + alibi [b·h, 1, s], viewed as [b, h, s, s],
	// masked_fill(mask [b, 1, s, s], finfo.min), Softmax, viewed back,
	// · v.
	bloomNodes := func(q, kt, v, y string) []*ir.Node { return bloomChain("", q, kt, v, y) }
	bloomIn := []*ir.ValueInfo{vi("alibi", ir.Float, b*h, 1, s), vi("mask", ir.Bool, b, 1, s, s)}
	bloomInits := func() map[string]*ir.Tensor { return bloomChainInits(b, h, s) }
	bloom := synth{
		inputs: append([]*ir.ValueInfo{vi("q", ir.Float, b*h, s, d), vi("kt", ir.Float, b*h, d, s), vi("v", ir.Float, b*h, s, d)}, bloomIn...),
		inits:  bloomInits(),
		nodes:  bloomNodes("q", "kt", "v", "y"),
	}
	// bloomCausal's mask is BLOOM's causal | padding, the padding left
	// (batch item 0's first two keys): its first queries see no key.
	bloomCausal := synth{
		inputs: append([]*ir.ValueInfo{vi("q", ir.Float, b*h, s, d), vi("kt", ir.Float, b*h, d, s), vi("v", ir.Float, b*h, s, d)},
			vi("alibi", ir.Float, b*h, 1, s), vi("pad", ir.Bool, b, 1, 1, s)),
		inits: bloomInits(),
		nodes: append([]*ir.Node{node("Or", []string{"causal", "pad"}, []string{"mask"})}, bloomNodes("q", "kt", "v", "y")...),
	}
	bloomCausal.inits["causal"] = causalBool(s, s, 0, true)
	// bloomCausalOnly's mask is the causal constant alone (no padding).
	bloomCausalOnly := bloom
	bloomCausalOnly.inputs = bloomCausal.inputs[:4]
	bloomCausalOnly.inits = bloomInits()
	bloomCausalOnly.inits["mask"] = causalBool(s, s, 0, true)
	// bloomCausalFill fills the future keys with -1e4 instead: a finite
	// fill, which the fused node cuts only checked and with no bias
	// before it, so the mask stays a mask.
	bloomCausalFill := bloomCausalOnly
	bloomCausalFill.inits = bloomInits()
	bloomCausalFill.inits["mask"], bloomCausalFill.inits["fill"] = causalBool(s, s, 0, true), sc(-1e4)
	leftPad := ir.NewTensor(ir.Bool, []int{b, 1, 1, s})
	leftPad.Bools()[0], leftPad.Bools()[1] = true, true
	// bloomQKV makes q, k and v as BLOOM does from [b, s, h, d] tensors:
	// q.transpose(1, 2).reshape(b·h, s, d), k.permute(0, 2, 3, 1)
	// .reshape(b·h, d, s); and merges the output back to [b, s, h·d].
	bloomQKV := synth{
		inputs: append([]*ir.ValueInfo{vi("q4", ir.Float, b, s, h, d), vi("k4", ir.Float, b, s, h, d), vi("v4", ir.Float, b, s, h, d)}, bloomIn...),
		inits:  bloomInits(),
	}
	bloomQKV.inits["qshape"], bloomQKV.inits["kshape"] = int64s(b*h, s, d), int64s(b*h, d, s)
	bloomQKV.inits["oshape"], bloomQKV.inits["merged"] = int64s(b, h, s, d), int64s(b, s, h*d)
	bloomQKV.nodes = append([]*ir.Node{
		node("Transpose", []string{"q4"}, []string{"qt"}, perm(0, 2, 1, 3)), node("Reshape", []string{"qt", "qshape"}, []string{"q"}),
		node("Transpose", []string{"k4"}, []string{"kp"}, perm(0, 2, 3, 1)), node("Reshape", []string{"kp", "kshape"}, []string{"kt"}),
		node("Transpose", []string{"v4"}, []string{"vt"}, perm(0, 2, 1, 3)), node("Reshape", []string{"vt", "qshape"}, []string{"v"})},
		append(bloomNodes("q", "kt", "v", "o3"),
			node("Reshape", []string{"o3", "oshape"}, []string{"o4"}), node("Transpose", []string{"o4"}, []string{"ot"}, perm(0, 2, 1, 3)),
			node("Reshape", []string{"ot", "merged"}, []string{"y"}))...)
	// pOnly views P alone: scores [b, h, s, s], P viewed as [b·h, s, s],
	// V [b·h, s, d].
	pOnly := synth{
		inputs: []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("kt", ir.Float, b, h, d, s), vi("v", ir.Float, b*h, s, d), vi("pad", ir.Float, b, 1, 1, s)},
		inits:  map[string]*ir.Tensor{"folded": int64s(b*h, s, s)},
		nodes: []*ir.Node{node("MatMul", []string{"q", "kt"}, []string{"s0"}), node("Add", []string{"s0", "pad"}, []string{"s1"}),
			node("Softmax", []string{"s1"}, []string{"p"}, axis), node("Reshape", []string{"p", "folded"}, []string{"p3"}),
			node("MatMul", []string{"p3", "v"}, []string{"y"})},
	}
	// regroup views the scores [2, 3, s, s] as shape to, then back, with
	// an additive mask of the given shape in between.
	regroup := func(to []int64, mask ...int) synth {
		return synth{
			inputs: []*ir.ValueInfo{vi("q", ir.Float, 2, 3, s, d), vi("kt", ir.Float, 2, 3, d, s), vi("v", ir.Float, 2, 3, s, d), vi("m", ir.Float, mask...)},
			inits:  map[string]*ir.Tensor{"to": int64s(to...), "back": int64s(2, 3, s, s)},
			nodes: []*ir.Node{node("MatMul", []string{"q", "kt"}, []string{"s0"}), node("Reshape", []string{"s0", "to"}, []string{"s1"}),
				node("Add", []string{"s1", "m"}, []string{"s2"}), node("Reshape", []string{"s2", "back"}, []string{"s3"}),
				node("Softmax", []string{"s3"}, []string{"p"}, axis), node("MatMul", []string{"p", "v"}, []string{"y"})},
		}
	}
	cases := []struct {
		name   string
		syn    synth
		feeds  map[string]*ir.Tensor
		ops    string // replaced op types
		attrs  string // fusedAttrs of the fused node
		around string // op types of the fusion's steps in order, * the fused one ("": it alone)
		reads  string // op types of the movement steps it reads or writes through
		none   bool   // must stay unfused
	}{
		{name: "Swin: bias, view, window mask, view back", syn: swin, feeds: map[string]*ir.Tensor{"mask": swinMask},
			ops:   "Mul Transpose MatMul Add Reshape Add Reshape Softmax MatMul",
			attrs: "scale=0.125 mask_kind=additive mask_scale=1 bias_scale=1 q_view k_view v_view out_shape out_view"},
		{name: "BLOOM: ALiBi, view, masked_fill, softmax, view back", syn: bloom, feeds: map[string]*ir.Tensor{"mask": randBoolsKeyZeroKept(r, b, 1, s, s)},
			ops:    "MatMul Mul Add Reshape Where Softmax Reshape MatMul",
			attrs:  "scale=0.35 k_transposed=1 bias_first=1 mask_kind=bool_true_masks mask_fill=-3.4028235e+38 bias_scale=1 q_view k_view v_view out_shape out_view",
			around: "Reshape *"},
		{name: "BLOOM: q, k, v transposed and folded, the output unfolded and merged", syn: bloomQKV, feeds: map[string]*ir.Tensor{"mask": randBoolsKeyZeroKept(r, b, 1, s, s)},
			ops:    "MatMul Mul Add Reshape Where Softmax Reshape MatMul",
			attrs:  "scale=0.35 k_transposed=1 bias_first=1 mask_kind=bool_true_masks mask_fill=-3.4028235e+38 bias_scale=1 q_view k_view v_view out_shape out_view",
			around: "Reshape *", reads: "Transpose Reshape Transpose Reshape Transpose Reshape Reshape Transpose Reshape"},
		{name: "BLOOM: causal | left padding, the cut and the padding mask, rows that see no key uniform", syn: bloomCausal, feeds: map[string]*ir.Tensor{"pad": leftPad},
			ops:   "Or MatMul Mul Add Reshape Where Softmax Reshape MatMul",
			attrs: "scale=0.35 k_transposed=1 bias_first=1 causal=1 masked_rows_uniform=1 mask_kind=bool_true_masks mask_fill=-Inf bias_scale=1 q_view k_view v_view out_shape out_view", around: "Reshape *"},
		{name: "BLOOM: the causal mask alone, the cut; the ALiBi term the additive mask before it", syn: bloomCausalOnly,
			ops:   "MatMul Mul Add Reshape Where Softmax Reshape MatMul",
			attrs: "scale=0.35 k_transposed=1 causal=1 mask_kind=additive mask_scale=1 q_view k_view v_view out_shape out_view", around: "Reshape *"},
		{name: "BLOOM: the causal mask alone filled with -1e4 after the ALiBi term stays the mask", syn: bloomCausalFill,
			ops:   "MatMul Mul Add Reshape Where Softmax Reshape MatMul",
			attrs: "scale=0.35 k_transposed=1 bias_first=1 mask_kind=bool_true_masks mask_fill=-10000 bias_scale=1 q_view k_view v_view out_shape out_view", around: "Reshape *"},
		{name: "BLOOM, the weights also a graph output", syn: withOutputs(bloom, "p"), feeds: map[string]*ir.Tensor{"mask": randBoolsKeyZeroKept(r, b, 1, s, s)},
			ops:    "MatMul Mul Add Reshape Where Softmax Reshape MatMul",
			attrs:  "scale=0.35 k_transposed=1 bias_first=1 mask_kind=bool_true_masks mask_fill=-3.4028235e+38 bias_scale=1 scores_mode=weights q_view k_view v_view out_shape out_view",
			around: "Reshape *"},
		{name: "BLOOM, the weights viewed back also a graph output", syn: withOutputs(bloom, "p3"), feeds: map[string]*ir.Tensor{"mask": randBoolsKeyZeroKept(r, b, 1, s, s)},
			ops:    "MatMul Mul Add Reshape Where Softmax Reshape MatMul",
			attrs:  "scale=0.35 k_transposed=1 bias_first=1 mask_kind=bool_true_masks mask_fill=-3.4028235e+38 bias_scale=1 scores_mode=weights q_view k_view v_view out_shape out_view",
			around: "Reshape * Reshape"},
		{name: "Swin, the weights read before the product", syn: swinWeights, feeds: map[string]*ir.Tensor{"mask": swinMask},
			ops:    "Mul Transpose MatMul Add Reshape Add Reshape Softmax MatMul",
			attrs:  "scale=0.125 mask_kind=additive mask_scale=1 bias_scale=1 scores_mode=weights q_view k_view v_view out_shape out_view",
			around: "* Reshape"},
		{name: "P viewed as [b·h, s, s] only", syn: pOnly,
			ops: "MatMul Add Softmax Reshape MatMul", attrs: "scale=1 k_transposed=1 mask_kind=additive mask_scale=1 q_view k_view v_view out_shape out_view"},
		{name: "a mask on the scores viewed as [6, s, s]: split by a Reshape step", syn: regroup([]int64{6, s, s}, 6, 1, s),
			ops: "MatMul Reshape Add Reshape Softmax MatMul", attrs: "scale=1 k_transposed=1 mask_kind=additive mask_scale=1 q_view k_view v_view out_shape out_view", around: "Reshape *"},
		{name: "matrices grouped otherwise ([2, 3] viewed as [3, 2]): not fused", syn: regroup([]int64{3, 2, s, s}, 1, 2, 1, s), none: true},
		{name: "a view that moves the keys: not fused", syn: regroup([]int64{2, 3, s * s}, s*s), none: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := fuseSynth(t, r, c.syn, c.feeds, c.ops, c.attrs, c.none)
			if c.none {
				return
			}
			var around []string
			for _, n := range fs[0].Nodes {
				if n == fs[0].Node {
					around = append(around, "*")
				} else {
					around = append(around, n.OpType)
				}
			}
			if g := strings.Join(around, " "); g != c.around {
				t.Errorf("runs %q, want %q", g, c.around)
			}
			var reads []string
			for _, n := range fs[0].Absorbed {
				reads = append(reads, n.OpType)
			}
			if g := strings.Join(reads, " "); g != c.reads {
				t.Errorf("reads or writes through %q, want %q", g, c.reads)
			}
		})
	}
}

// bloomChain is BLOOM's attention chain on [b·h, s, d] operands, its
// intermediates named with prefix pre: q·kᵀ (K given as [b·h, d, s]) ·
// alpha + alibi [b·h, 1, s], viewed as [b, h, s, s], masked_fill(mask
// [b, 1, s, s], finfo.min), Softmax, viewed back, · v. bloomChainInits
// holds its constants.
func bloomChain(pre, q, kt, v, y string) []*ir.Node {
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	return []*ir.Node{
		node("MatMul", []string{q, kt}, []string{pre + "s0"}), node("Mul", []string{pre + "s0", "alpha"}, []string{pre + "s1"}),
		node("Add", []string{pre + "s1", "alibi"}, []string{pre + "s2"}), node("Reshape", []string{pre + "s2", "heads"}, []string{pre + "s3"}),
		node("Where", []string{"mask", "fill", pre + "s3"}, []string{pre + "s4"}), node("Softmax", []string{pre + "s4"}, []string{pre + "p"}, axis),
		node("Reshape", []string{pre + "p", "folded"}, []string{pre + "p3"}), node("MatMul", []string{pre + "p3", v}, []string{y})}
}

func bloomChainInits(b, h, s int64) map[string]*ir.Tensor {
	return map[string]*ir.Tensor{"alpha": sc(0.35), "fill": sc(-math.MaxFloat32), "heads": int64s(b, h, s, s), "folded": int64s(b*h, s, s)}
}

// TestRegroupedMaskShared: two BLOOM layers read one ALiBi tensor; the
// first fusion adds the Reshape step that regroups it, the second reads
// its output (one step in the plan, run as a view), and both fused
// outputs equal the unfused graph's.
func TestRegroupedMaskShared(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	const b, h, s, d = 2, 3, 6, 4
	m := synth{
		inputs: []*ir.ValueInfo{vi("q", ir.Float, b*h, s, d), vi("kt", ir.Float, b*h, d, s), vi("v", ir.Float, b*h, s, d),
			vi("alibi", ir.Float, b*h, 1, s), vi("mask", ir.Bool, b, 1, s, s)},
		inits:   bloomChainInits(b, h, s),
		nodes:   append(bloomChain("l0/", "q", "kt", "v", "y0"), bloomChain("l1/", "y0", "kt", "v", "y")...),
		outputs: []string{"y"},
	}.model()
	in := synthInputs(r, m, map[string]*ir.Tensor{"mask": randBoolsKeyZeroKept(r, b, 1, s, s)})
	fused, unfused, fs := runBoth(t, m, in)
	sameOutputs(t, fused, unfused)
	if len(fs) != 2 {
		t.Fatalf("%d fusions, want 2", len(fs))
	}
	if len(fs[0].Nodes) != 2 || fs[0].Nodes[0].OpType != "Reshape" || len(fs[1].Nodes) != 0 {
		t.Errorf("fusions run %v and %v, want a Reshape before the first only", fs[0].Nodes, fs[1].Nodes)
	}
	p, err := Compile(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := p.planFor(in)
	if err != nil {
		t.Fatal(err)
	}
	defer p.donePlan(pl)
	var reshapes []string
	for _, st := range pl.steps {
		if st.node.OpType == "Reshape" {
			reshapes = append(reshapes, st.node.Name)
			if !st.view {
				t.Errorf("step %s copies; want a view", st.node.Name)
			}
		}
	}
	want := []string{ops.AttentionTempPrefix + "alibi/regrouped_2x3x1x6"}
	if !slices.Equal(reshapes, want) {
		t.Errorf("Reshape steps %q, want %q", reshapes, want)
	}
	for _, f := range fs {
		if f.Node.Input(5) != want[0] {
			t.Errorf("fused node %s reads bias %q, want %q", f.Node.Name, f.Node.Input(5), want[0])
		}
	}
}

// fuseSynth runs a synthesized model (output "y" first) fused and unfused
// with random inputs but feeds, compares every output, and checks that it
// has one attention fusion replacing nodes of the op types ops with the
// fused attributes attrs, or none at all (none). It returns the fusions.
func fuseSynth(t *testing.T, r *rand.Rand, syn synth, feeds map[string]*ir.Tensor, ops, attrs string, none bool) []Fusion {
	t.Helper()
	syn.outputs = append([]string{"y"}, syn.outputs...)
	m := syn.model()
	fused, unfused, fs := runAll(t, m, synthInputs(r, m, feeds))
	for _, o := range syn.outputs {
		sameOutputs(t, fused[o], unfused[o])
	}
	if none {
		if len(fs) != 0 {
			t.Fatalf("%d fusions, want none: %s", len(fs), fs[0].Node.Doc)
		}
		return nil
	}
	if g := fusedAttrs(oneFusion(t, fs, ops)); g != attrs {
		t.Errorf("attributes %s, want %s", g, attrs)
	}
	return fs
}

// withOutputs returns syn with more graph outputs.
func withOutputs(syn synth, outputs ...string) synth {
	syn.outputs = append(slices.Clone(syn.outputs), outputs...)
	return syn
}
