package graph

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Attention fusion.
//
// The rewrite runs at plan time, once per set of concrete input shapes,
// after concrete inference and folding (buildPlan calls fuseAttention on
// the step list unless Options.NoFuse is set). At that point every scale
// computed from the shapes (Pow(Cast(Gather(Shape(k))), 0.5), ...), every
// fill value and every mask built from the lengths alone (a causal mask
// from Trilu or a sliced buffer, a position bias from Range) is a folded
// constant, and the folded nodes are no longer steps, so the matcher sees
// only the compute chain, read backwards from the product with V:
//
//	O = MatMul(P, V) | Einsum(P, V) | Einsum(V, P)   any einsum spelling
//	                                       of P·V, the weights either operand
//	P = Softmax(S, last axis), then any no-op Casts (float→float) or
//	    Identity; P (or a Cast of it) may have other readers or be a graph
//	    output (nn.MultiheadAttention's need_weights): the fused node then
//	    also writes it, as its output 1 (scores_mode weights); and at most
//	    one Where(cond, 0, P) | Where(cond, P, 0) zeroing the weights the
//	    scores' own mask hides (ESPnet: masked_rows_zero, fuse_zero_rows.go)
//	S = the scores changed by any number of
//	    Div(S, c) | Mul(S, c) | Mul(c, S)  c a float32 constant, one element
//	    Cast(S) float→float | Identity(S) | Expand(S) or Slice(S) to S's
//	                                       own shape (a slice assignment's
//	                                       value; its full ScatterND runs as
//	                                       an Identity: scatter_full.go)
//	    Add(S, m) | Add(m, S) | Sub(S, m)  m float32: a mask or a bias
//	    Where(cond, fill, S) | Where(cond, S, fill)   cond bool, fill a
//	                                       one-element constant
//	    Reshape(S) (Squeeze, Unsqueeze, Flatten) keeping the last two
//	                                       dims, regrouping the batch dims
//	                                       (fuse_regroup.go; also on P)
//	    Reshape(Reshape(S) to [.., A.., kh, kw] + a term by the key's
//	    grid row + one by its column)      SAM's decomposed relative
//	                                       positions: the fused node's
//	                                       bias by a key grid (fuse_grid.go)
//	    Sub(S, ReduceMax(S, last axis, keepdims)), or Sub(S, Unsqueeze(
//	    ReduceMax(S, last axis), last axis)): the row maximum taken off (a
//	                                       "stable softmax"; LayoutLMv3's
//	                                       PB-relax), dropped (rowMaxShift)
//	    with at most two masks (Where or Add/Sub) among them, at most one
//	    of them a Where, or two Wheres of one fill, a causal constant and
//	    a per-key mask (twoWheresCausal)
//	S = MatMul(Q', K') | Einsum(Q', K') | Einsum(K', Q')   any einsum
//	                                       spelling of Q·Kᵀ, Q either operand
//	Q' = Q scaled: Div/Mul by one-element constants (a scale folded into
//	    Q, or into both Q and K as Whisper does with d^-1/4 each; also one
//	    before the movement steps Q or K is read through, as BART's
//	    q_proj(x)·scaling before the head split: foldReadScales)
//	K' = K scaled, transposed (a Transpose swapping the last two axes,
//	    dropped, or any [.., D, Sk] tensor), and possibly repeated over
//	    grouped heads as transformers' repeat_kv does (Unsqueeze → Expand
//	    → Reshape: the fused node reads the KV heads, kv_group = the
//	    repeat) or broadcast over its batch dims (Expand: multi-query)
//	V' = V repeated or broadcast as K is
//
// The chain's intermediates must have no other reader among the remaining
// steps and must not be graph outputs (P and its Casts excepted); they are
// then never computed. An added mask of only 0 and -inf is read as a bool
// mask with a -inf fill, so that the kernel skips the key blocks it hides:
// Where(cond, -inf, 0) (or Where(cond, 0, -inf)), possibly times positive
// constants, nn.MultiheadAttention's float version of a bool mask, as cond
// when nothing else reads it; a plan constant (a causal mask folded from
// the lengths) as its bool form, made once per plan. A chain that also has
// a Where keeps such a mask additive (the fused node has one bool mask).
// A chain's only mask that is a causal constant (bool with a -inf fill,
// or additive 0/-inf), or a causal constant merged with a per-key mask
// (Or / And of bools; nn.MultiheadAttention's Where(key mask, -inf,
// causal) or Add of additive ones), becomes the fused node's causal cut,
// with the per-key mask as its mask (fuse_causal.go): -inf is exact. A
// finite fill is cut only at or below -2^127 (finfo(float32).min, as
// LLaMA's mask): in a row that keeps a key the hidden keys' exp
// underflows to 0 exactly as in the export. A row that loses every key (a
// left-padded prompt's first queries, an offset < 0) sees that fill on
// every key in the export, so its softmax is uniform over all Sk keys:
// the fused node then takes masked_rows_uniform (such a row's output is
// the mean of V), and the padding becomes a -inf key mask. That holds
// only where every score of such a row is the one fill: a bool mask with
// one fill, transformers' masked_fill of the padding with finfo.min on
// its finfo.min causal mask (Where(B, F, A), the same F), or the causal
// mask alone; mixed fills (a -inf causal part, an added finfo.min key
// mask that makes -inf where both hide) stay the mask. GPT-2's -1e4 and
// seed 003's -1e9 (alone, or followed by an additive mask such as GPT-2's
// padding) are cut with a check: hidden keys take weight once a row's
// kept scores all lie less than 104 above the fill (TestCausalCutFills:
// with scores of -2·10^4 they take it all), so the fused node takes
// causal_fill and the kernel computes such rows' query blocks again with
// the hidden scores at the fill.
// transformers 4.38-4.44's padding test over its finfo.min causal mask,
// (causal + attention_mask) == 0, reaches the matcher already narrowed to
// a per-key test (key_padding.go), and so takes the causal cut as the
// masked_fill form above does.
// OPT's floor after its mask, Max(S + Add(causal, padding), finfo.min),
// makes every hidden score the floor: with every fill at or below it, the
// cut, the padding a -inf key mask and masked_rows_uniform, the floor
// dropped (fuse_floored.go); other floors stay the fused node's
// scores_min, the masks values.
// A mask or bias computed element-wise from an Expand (transformers'
// _expand_mask) is read as computed before the broadcast: the fusion runs
// those steps on the small tensor and the fused node broadcasts the result
// (fuse_narrow.go). An added term that is the sum of a bias computed on
// every call and a per-key mask (T5's position bias plus its padding)
// becomes the fused node's two inputs, and the sum is not computed
// (biasPlusKeyMask).
// The matched steps are replaced by one com.attnrun:FusedAttention step
// (see ops/attention.go for its contract) at the position of the final
// product (or of the first reader of P, when
// one comes before it and every input of the fused node is ready there),
// writing O's slot; RunOptions.OnNode reports it with that step's index in
// Program.Order and the fused node. Einsum operands are read through the
// permutation their labels give (q_view, k_view, v_view, out_view), and
// like every operand through the movement steps before them (views.go).
// Before accepting a match, the fused node's own inference must give
// exactly O's (and P's) concrete shape, so a broadcast the fused op does
// not express (a scale of higher rank, a mask widening Sq) leaves the
// chain unfused. A chain left unfused runs node by node, and
// Program.MissedAttention says why (fuse_missed.go).
//
// Scales compose: the fused node has scale = the product of every scale
// in the chain (those on Q and K too); a mask or bias met before scalings
// b is scaled by b (a Where fill becomes fill·b, an additive mask gets
// mask_scale = b). The first mask of two is the fused node's mask and the
// second its bias (input 5), or, when the first is additive and the
// second a Where, the first is the bias, with bias_first. This changes
// rounding (s·(a·b) for (s·a)·b, s·(1/c) for s/c) by an ulp or so, never
// the masking semantics.

// Fusion describes one fused region of a plan: the synthetic node that runs
// and the nodes of the graph it replaced, in execution order.
type Fusion struct {
	// Node is the fused node (domain com.attnrun). Its inputs and output
	// are tensors of the original graph.
	Node *ir.Node
	// Replaced lists the graph nodes of the fused computation, no longer
	// executed.
	Replaced []*ir.Node
	// Absorbed lists the data-movement nodes (Reshape, Transpose, Split,
	// Squeeze, ...) that are no longer executed because the fused node
	// reads its inputs or writes its output through a strided view
	// (views.go) instead, and the nodes no longer executed because it
	// reads around them: a scaling of Q or K it folds into its scale, the
	// full-size steps of a mask it reads as computed before its broadcast
	// (fuse_narrow.go).
	Absorbed []*ir.Node
	// Nodes, when the rewrite runs more than Node (ONNX Attention's
	// lowering: KV-cache Concat, head split, Casts), lists every node it
	// runs in place of Replaced, in order, Node among them, with each
	// node's domain opset in Opsets. Empty otherwise.
	Nodes  []*ir.Node
	Opsets []int
}

// Describe names the fused node and the graph nodes it replaced, for
// messages about the fused step: `fused node "/attn/FusedAttention"
// (com.attnrun:FusedAttention, replacing "/MatMul", "/Div", "/Softmax",
// "/MatMul_1")`. A long list is elided with a count.
func (f Fusion) Describe() string {
	names := make([]string, len(f.Replaced))
	for i, n := range f.Replaced {
		names[i] = strconv.Quote(n.Label())
	}
	list := strings.Join(names, ", ")
	if len(names) > 12 {
		list = strings.Join(names[:10], ", ") + fmt.Sprintf(", … %d more … , ", len(names)-11) + names[len(names)-1]
	}
	return ir.Elide(fmt.Sprintf("fused node %q (%s, replacing %s)", f.Node.Label(), f.Node.QualifiedOp(), list))
}

// Fusions returns the fused regions of the plan for the given inputs'
// shapes (building and caching the plan): score sums merged into one
// product (fuse_score_sum.go, a MatMul the attention fusion then takes)
// first, then com.attnrun:FusedAttention ones, then com.attnrun:FusedMatMul
// ones (fuse_matmul.go), then Gelu ones (fuse_gelu.go), then
// LayerNormalization (fuse_layernorm.go), RMSNormalization
// (fuse_rmsnorm.go) and com.attnrun:NormalizeL2 (fuse_l2norm.go) ones. It
// is empty when Options.NoFuse is set or nothing matched.
func (p *Program) Fusions(inputs map[string]*ir.Tensor) ([]Fusion, error) {
	pl, err := p.planFor(inputs)
	if err != nil {
		return nil, err
	}
	p.donePlan(pl)
	return pl.fusions, nil
}

// fuseAttention rewrites pl.steps in place, replacing every matched
// attention chain by one FusedAttention step, and records pl.fusions.
func (p *Program) fuseAttention(pl *plan, types map[string]ops.Value) {
	schema, err := ops.Lookup(ops.DomainAttnrun, ops.FusedAttentionOp, 1)
	if err != nil {
		return // the op is not linked in: nothing to fuse
	}
	f := newFuser(p, pl, types)
	removed := f.removed
	insert := map[int][]step{}       // fused steps to run before step i
	readChains := map[*ir.Node]int{} // movement node read through → fusion
	for i, st := range pl.steps {
		if removed[i] || (st.node.OpType != "MatMul" && st.node.OpType != "Einsum") || !isDefaultDomain(st.node) {
			continue
		}
		m, ok := f.match(i)
		if !ok {
			pl.noteMiss(st.node, f.miss.reason)
			continue
		}
		fused, added, reads, writes, ok := f.build(schema, m)
		if !ok {
			pl.noteMiss(st.node, f.miss.reason)
			continue
		}
		fused, scaled := f.foldReadScales(schema, fused)
		reads = append(reads, scaled...)
		pos, ok := f.placement(m, fused, i)
		if !ok || !f.readyBefore(append(added.pre[:len(added.pre):len(added.pre)], fused), pos) {
			pl.noteMiss(st.node, "an input of the fused op is computed by the chain itself, or only after the place it would run")
			continue
		}
		fs := step{index: st.index, node: fused, schema: schema, ctx: ops.Context{Opset: 1, Threads: st.ctx.Threads}}
		for _, name := range fused.Outputs {
			fs.outs = append(fs.outs, f.slotOf(name)) // one the match made has no slot yet
			fs.want = append(fs.want, types[name].Type)
		}
		for _, name := range fused.Inputs {
			s := -1
			if name != "" {
				s = f.slotOf(name) // a constant the match made has no slot yet
				if c := types[name].Const; c != nil {
					pl.consts[s] = c
				}
			}
			fs.args = append(fs.args, s)
		}
		fusion := Fusion{Node: fused}
		for _, k := range m.steps {
			fusion.Replaced = append(fusion.Replaced, pl.steps[k].node)
			removed[k] = true
		}
		for _, k := range writes {
			fusion.Absorbed = append(fusion.Absorbed, pl.steps[k].node)
			removed[k] = true
		}
		for _, k := range append(reads, m.absorbs...) {
			readChains[pl.steps[k].node] = len(pl.fusions)
		}
		steps := f.addedSteps(added, fs, pos)
		if len(steps) > 1 {
			fusion.Nodes, fusion.Opsets = stepNodes(steps)
		}
		insert[pos] = append(insert[pos], steps...)
		pl.fusions = append(pl.fusions, fusion)
	}
	if len(insert) == 0 {
		return
	}
	replace := map[int][]step{}
	for pos, add := range insert {
		if !removed[pos] {
			add = append(add, pl.steps[pos])
		}
		replace[pos] = add
	}
	pl.steps = replaceSteps(pl.steps, replace, removed)
	p.dropDead(pl, readChains)
}

// build makes the fused node of a match: it reads Q, K and V through the
// views their permutations, head repeats and batch regrouping need, then,
// where inference still agrees, through the movement steps before them
// (reads lists those steps, and the full-size steps of a mask it reads as
// computed before its broadcast, fuse_narrow.go), and writes its result
// through the movement steps after the final product (writes). added lists
// the nodes to run around it (those narrowed masks; Reshapes to and from a
// regrouped batch, fuse_regroup.go). ok is false when the node's inference
// does not give the chain's output types.
func (f *fuser) build(schema *ops.Schema, m attnMatch) (fused *ir.Node, added addedNodes, reads, writes []int, ok bool) {
	// no records why the matched chain does not become a fused node
	// (overriding the matcher's reasons: the match itself held).
	no := func(format string, args ...any) (*ir.Node, addedNodes, []int, []int, bool) {
		f.miss = attnMiss{depth: len(m.steps), reason: fmt.Sprintf(format, args...)}
		return nil, added, nil, nil, false
	}
	if !f.gridBiasNodes(m, &added) {
		return no("the key grid's bias has no Reshape or Concat to join its terms")
	}
	m, reads = f.narrowMasks(m, &added) // reads: the full-size mask steps, dropped once nothing reads them
	if m, ok = f.headScaledQ(m, &added); !ok {
		return no("the per-head scale of the scores cannot be moved onto Q")
	}
	if m, ok = f.weightsScaledV(m, &added); !ok {
		return no("the factor on the softmax's weights (node %q) cannot be moved onto V: V is read through a permutation or a head repeat, or the factor widens it", m.weightsScaleNode)
	}
	rg, m, ok := f.regroup(m, &added)
	if !ok {
		return no("the Reshapes regrouping the scores' batch dims do not map onto Q, K and V")
	}
	fused, ok = m.node(f.pl.steps)
	if !ok {
		return no("the chain's masks or scale have no form in the fused op")
	}
	out := fused.Outputs[0]
	attrs := []string{"q_view", "k_view", "v_view"}
	operands := []attnOperand{m.q, m.k, m.v}
	for k, op := range operands {
		base, v, _, ok := f.regroupedOperand(rg, k, op, false)
		if !ok {
			return no("%s has no strided view the fused op can read", []string{"Q", "K", "V"}[k])
		}
		if base != op.name || op.perm != nil || op.grouped || rg != nil {
			fused.Inputs[k] = base
			fused.Attrs = append(fused.Attrs, intsAttr(attrs[k], v.Ints()))
		}
	}
	var inv []int // the view of the logical result in the product's output
	if m.outPerm != nil {
		inv = make([]int, len(m.outPerm))
		for j, l := range m.outPerm {
			inv[l] = j
		}
		shape, _ := f.concreteShape(out)
		v, ok := ops.Contiguous(shape).Transpose(inv)
		if !ok {
			return no("the einsum's output order has no view the fused op can write")
		}
		fused.Attrs = append(fused.Attrs, intsAttr("out_shape", toInt64s(shape)), intsAttr("out_view", v.Ints()))
	}
	if rg != nil {
		shape, _ := f.concreteShape(out)
		v, ok := rg.outView(ops.Contiguous(shape))
		if !ok {
			return no("the regrouped output has no view the fused op can write")
		}
		fused.Attrs = append(fused.Attrs, intsAttr("out_shape", toInt64s(shape)), intsAttr("out_view", v.Ints()))
	}
	if !f.inferMatches(schema, fused, out) {
		return no("the fused op's shapes do not give the chain's output %v (a broadcast it does not express)", f.types[out].Type)
	}
	// Read Q, K and V through the movement steps before them, and write
	// the result through those after it, where views allow.
	for k, op := range operands {
		base, v, chain, ok := f.regroupedOperand(rg, k, op, true)
		if !ok || len(chain) == 0 {
			continue
		}
		trial := cloneNode(fused)
		trial.Inputs[k] = base
		trial.Attrs = withAttr(trial.Attrs, intsAttr(attrs[k], v.Ints()))
		if f.inferMatches(schema, trial, out) {
			fused, reads = trial, append(reads, chain...)
		}
	}
	if final, v, chain, ok := f.regroupedWriteView(rg, out); ok && len(chain) > 0 {
		if inv != nil {
			v, ok = v.Transpose(inv)
		}
		shape, _ := f.concreteShape(final)
		trial := cloneNode(fused)
		trial.Attrs = withAttr(withAttr(trial.Attrs, intsAttr("out_shape", toInt64s(shape))), intsAttr("out_view", v.Ints()))
		trial.Outputs[0] = final
		if ok && f.inferMatches(schema, trial, final) {
			fused, writes = trial, chain
		}
	}
	return fused, added, reads, writes, true
}

// foldReadScales folds into the scale of fused node n a scale on the
// tensor it reads Q or K from through movement steps (transformers'
// q_proj(x)·scaling before the head split; the matcher folds a scale
// applied after the movement itself): n reads the unscaled tensor. It
// returns the node and the scaling steps it reads around, which are
// dropped when nothing else reads them (then listed in Absorbed).
func (f *fuser) foldReadScales(schema *ops.Schema, n *ir.Node) (*ir.Node, []int) {
	var steps []int
	for k := range 2 {
		i, sn, ok := f.internal(n.Inputs[k])
		if !ok {
			continue
		}
		next, c, ok := f.scaling(sn)
		if !ok {
			continue
		}
		scale, _ := n.AttrFloat("scale", 1)
		trial := cloneNode(n)
		trial.Inputs[k] = next
		trial.Attrs = withAttr(trial.Attrs, &ir.Attribute{Name: "scale", Type: ir.AttrFloat, Float: float32(float64(scale) * c)})
		if f.inferMatches(schema, trial, n.Outputs[0]) {
			n, steps = trial, append(steps, i)
		}
	}
	return n, steps
}

// operandView returns the tensor the fused node reads for an operand and
// the view of it that gives the operand (the head repeat's size-1 axis
// dropped, the einsum permutation applied), through the movement steps
// before it (chain) when through is set.
func (f *fuser) operandView(op attnOperand, through bool) (base string, v ops.View, chain []int, ok bool) {
	shape, ok := f.concreteShape(op.name)
	if !ok {
		return "", ops.View{}, nil, false
	}
	base, v = op.name, ops.Contiguous(shape)
	if through {
		if b, bv, c, ok := f.readView(op.name); ok && len(c) > 0 {
			base, v, chain = b, bv, c
		}
	}
	if op.grouped {
		if v, ok = v.Squeeze([]int{len(v.Shape) - 3}); !ok {
			return "", ops.View{}, nil, false
		}
	}
	if op.perm != nil {
		if v, ok = v.Transpose(op.perm); !ok {
			return "", ops.View{}, nil, false
		}
	}
	return base, v, chain, true
}

// placement returns the step before which the fused node runs: the final
// product's (step i), or the first step reading the weights output when
// that comes earlier. ok is false when an input of the fused node is not
// computed by then, or is computed by a step the fusion replaces.
func (f *fuser) placement(m attnMatch, fused *ir.Node, i int) (int, bool) {
	gone := map[int]bool{}
	for _, k := range m.steps {
		gone[k] = true
	}
	for _, name := range fused.Inputs {
		if k, ok := f.producer[name]; ok && name != "" && gone[k] {
			return 0, false // the chain computes an input (P·P is no attention)
		}
	}
	pos := i
	if w := m.weights; w != "" { // the graph's tensor, fused.Outputs[1] or a view of it
		for k := 0; k < i; k++ {
			if gone[k] || f.removed[k] {
				continue
			}
			if slices.Contains(f.pl.steps[k].node.Inputs, w) {
				pos = k
				break
			}
		}
	}
	if pos == i {
		return pos, true
	}
	for _, name := range fused.Inputs {
		if k, ok := f.producer[name]; ok && name != "" && k >= pos {
			return 0, false
		}
	}
	return pos, true
}

// replaceSteps returns steps with step i replaced by replace[i] and the
// removed steps dropped.
func replaceSteps(steps []step, replace map[int][]step, removed map[int]bool) []step {
	kept := steps[:0:0]
	for i, st := range steps {
		if add, ok := replace[i]; ok {
			kept = append(kept, add...)
		} else if !removed[i] {
			kept = append(kept, st)
		}
	}
	return kept
}

// inferMatches runs the fused node's inference and reports whether it gives
// exactly the concrete type the plan has for tensor out (its output 0), and
// for each further output of the node, that tensor's.
func (f *fuser) inferMatches(schema *ops.Schema, fused *ir.Node, out string) bool {
	in := make([]ops.Value, len(fused.Inputs))
	for k, name := range fused.Inputs {
		in[k] = f.types[name]
	}
	res, err := schema.Infer(fused, 1, in)
	if err != nil || len(res) != len(fused.Outputs) || !sameType(res[0].Type, f.types[out].Type) {
		return false
	}
	for k := 1; k < len(res); k++ {
		if !sameType(res[k].Type, f.types[fused.Outputs[k]].Type) {
			return false
		}
	}
	return true
}

// cloneNode copies a node's input, output and attribute lists (the
// attributes themselves are shared).
func cloneNode(n *ir.Node) *ir.Node {
	c := *n
	c.Inputs = append([]string{}, n.Inputs...)
	c.Outputs = append([]string{}, n.Outputs...)
	c.Attrs = append([]*ir.Attribute{}, n.Attrs...)
	return &c
}

func intsAttr(name string, v []int64) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrInts, Ints: v}
}

func toInt64s(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

// stepLastUses maps each slot read by a step to the index of the last step
// reading it.
func stepLastUses(steps []step) map[int]int {
	last := map[int]int{}
	for i, st := range steps {
		for _, s := range st.args {
			if s >= 0 {
				last[s] = i
			}
		}
	}
	return last
}

func isDefaultDomain(n *ir.Node) bool { return n.Domain == "" || n.Domain == "ai.onnx" }

func sameType(a, b ir.TypeInfo) bool {
	if a.DType != b.DType || a.RankKnown != b.RankKnown {
		return false
	}
	ad, ok1 := a.Shape.Concrete()
	bd, ok2 := b.Shape.Concrete()
	return ok1 && ok2 && slices.Equal(ad, bd)
}

// fuser holds what matching needs: the plan's steps, concrete types, the
// step producing each tensor, and how many step inputs read each tensor.
type fuser struct {
	pl       *plan
	types    map[string]ops.Value
	producer map[string]int
	uses     map[string]int
	slot     map[string]int // tensor → plan slot
	removed  map[int]bool   // steps already fused away
	// made maps the tensors that steps a fusion added compute (a mask
	// regrouped to the fused node's batch, fuse_regroup.go; one computed
	// before its broadcast, fuse_narrow.go) to the step they run before,
	// so that later fusions read them rather than add the steps again,
	// where they run no earlier (readyBefore).
	made map[string]int
	// prog is the program whose plan is rewritten; evals holds the masks
	// evalShapeOnly computed for the plan (fuse_eval.go), failed those it
	// could not compute in this pass.
	prog   *Program
	evals  *evalCache
	failed map[string]bool
	// cutOffs maps a bool mask made from an additive one to the causal
	// offset of the part of it the causal cut takes (keptRowsBoolMask),
	// boolFills to the additive mask's fill (boolForm). The bool masks
	// stay in types for the plan; a fuser that finds one it did not make
	// (no fill here) does not take it.
	cutOffs   map[string]int
	boolFills map[string]float32
	// miss is why the attention matcher gave up on the product it last
	// tried, where it got furthest (fuse_missed.go).
	miss attnMiss
}

// internal returns the producing step of a tensor that only one step reads
// and that is not a graph output, with its node (nil, false when the step
// is already part of another fusion).
func (f *fuser) internal(name string) (int, *ir.Node, bool) {
	i, ok := f.producer[name]
	if !ok || f.uses[name] != 1 || f.removed[i] {
		return 0, nil, false
	}
	n := f.pl.steps[i].node
	if !isDefaultDomain(n) {
		return 0, nil, false
	}
	return i, n, true
}

// producerNode returns the node of the plan's step computing tensor name,
// in the default domain and not part of another fusion, however many steps
// read it (nil, false otherwise).
func (f *fuser) producerNode(name string) (*ir.Node, bool) {
	i, ok := f.producer[name]
	if !ok || f.removed[i] {
		return nil, false
	}
	n := f.pl.steps[i].node
	return n, isDefaultDomain(n)
}

// constValue returns the constant value of tensor name with its data in
// memory, for a matcher that reads its elements: a weight held by
// reference is read back (valueReader). It is nil when name is no
// constant, or one whose data cannot be read, which no matcher matches.
func (f *fuser) constValue(name string) *ir.Tensor {
	return f.pl.values.value(name, f.types[name].Const)
}

// scalarConst returns the value of a float32 constant with one element.
func (f *fuser) scalarConst(name string) (float64, bool) {
	c := f.types[name].Const
	if c == nil || c.DType != ir.Float || ir.NumElements(c.Shape) != 1 {
		return 0, false
	}
	if c = f.constValue(name); c == nil || c.Len() != 1 {
		return 0, false
	}
	return float64(c.Float32s()[0]), true
}

func (f *fuser) isFloat32(name string) bool { return f.types[name].Type.DType == ir.Float }

// replaceChain replaces the matched steps of a rewrite (an elementwise
// chain, a MatMul and its bias Add) by one step running node n (op schema at opset, with threads), placed at
// the last of them, marks them removed, and records the fusion. n's inputs
// and output are tensors the plan already has slots for.
func (f *fuser) replaceChain(n *ir.Node, schema *ops.Schema, opset, threads int, matched []int, replace map[int][]step) {
	pl := f.pl
	last := slices.Max(matched)
	args := make([]int, len(n.Inputs))
	for k, name := range n.Inputs {
		args[k] = f.slot[name]
	}
	out := n.Outputs[0]
	ns := step{index: pl.steps[last].index, node: n, schema: schema, ctx: ops.Context{Opset: opset, Threads: threads},
		args: args, outs: []int{f.slot[out]}, want: []ir.TypeInfo{f.types[out].Type}}
	fusion := Fusion{Node: n}
	for k := range pl.steps { // graph order
		if slices.Contains(matched, k) {
			fusion.Replaced = append(fusion.Replaced, pl.steps[k].node)
			f.removed[k] = true
		}
	}
	replace[last] = []step{ns}
	pl.fusions = append(pl.fusions, fusion)
}
