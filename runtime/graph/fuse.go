package graph

import (
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Attention fusion.
//
// The rewrite runs at plan time, once per set of concrete input shapes,
// after concrete inference and folding (buildPlan calls fuseAttention on
// the step list unless Options.NoFuse is set). At that point every scale
// computed from the shapes (Pow(Cast(Gather(Shape(k))), 0.5), ...) and
// every fill value is a folded constant, and the folded nodes are no longer
// steps, so the matcher sees only the compute chain:
//
//	S = MatMul(Q, Kt)                    Kt = Transpose(K) swapping the last two
//	                                     axes (dropped), or any [.., D, Sk] tensor
//	S = Div(S, c) | Mul(S, c) | Mul(c, S) c a float32 constant with one element
//	S = Where(cond, fill, S)             cond bool, fill a one-element constant
//	    | Where(cond, S, fill)
//	    | Add(S, m) | Add(m, S)          m float32 (an additive mask)
//	P = Softmax(S, last axis)
//	O = MatMul(P, V)
//
// with any number of scalings before and after at most one mask. The chain's
// intermediates (S..., P, and Kt when its Transpose is absorbed) must have
// no other consumer among the remaining steps and must not be graph
// outputs; they are then never computed. The matched steps are replaced by
// one com.attnrun:FusedAttention step (see ops/attention.go for its
// contract) at the position of the last MatMul, writing O's slot;
// RunOptions.OnNode reports it with that MatMul's index in Program.Order and
// the fused node. Before
// accepting a match, the fused node's own inference must give exactly O's
// concrete shape, so a broadcast the fused op does not express (a scale of
// higher rank, a mask widening Sq) leaves the chain unfused.
//
// Scales compose: with scalings a before and b after the mask, the fused
// node has scale = a·b, a Where fill becomes fill·b, an additive mask gets
// mask_scale = b. This changes rounding (s·(a·b) for (s·a)·b, s·(1/c) for
// s/c) by an ulp or so, never the masking semantics.

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
	// (views.go) instead.
	Absorbed []*ir.Node
	// Nodes, when the rewrite runs more than Node (ONNX Attention's
	// lowering: KV-cache Concat, head split, Casts), lists every node it
	// runs in place of Replaced, in order, Node among them, with each
	// node's domain opset in Opsets. Empty otherwise.
	Nodes  []*ir.Node
	Opsets []int
}

// Fusions returns the fused regions of the plan for the given inputs'
// shapes (building and caching the plan): com.attnrun:FusedAttention ones
// first, then com.attnrun:FusedMatMul ones (fuse_matmul.go). It is empty
// when Options.NoFuse is set or nothing matched.
func (p *Program) Fusions(inputs map[string]*ir.Tensor) ([]Fusion, error) {
	pl, err := p.planFor(inputs)
	if err != nil {
		return nil, err
	}
	return pl.fusions, nil
}

// attnMatch is one matched attention chain.
type attnMatch struct {
	steps     []int // indices into plan steps, the last one the final MatMul
	q, k, v   string
	mask      string
	kT        bool
	maskKind  string
	scale     float64
	fill      float32
	maskScale float64
}

// fuseAttention rewrites pl.steps in place, replacing every matched
// attention chain by one FusedAttention step, and records pl.fusions.
func (p *Program) fuseAttention(pl *plan, types map[string]ops.Value) {
	schema, err := ops.Lookup(ops.DomainAttnrun, ops.FusedAttentionOp, 1)
	if err != nil {
		return // the op is not linked in: nothing to fuse
	}
	f := newFuser(p, pl, types)
	removed, slot := f.removed, f.slot
	replace := map[int][]step{}
	readChains := map[*ir.Node]int{} // movement node read through → fusion
	for i, st := range pl.steps {
		if removed[i] || st.node.OpType != "MatMul" || !isDefaultDomain(st.node) {
			continue
		}
		m, ok := f.match(i)
		if !ok {
			continue
		}
		fused := m.node(st.node, pl.steps)
		if !f.inferMatches(schema, fused, st.node.Outputs[0]) {
			continue
		}
		// Read Q, K and V through the movement steps before them, and
		// write the result through those after it, where views allow.
		var reads []int
		for k, attr := range []string{"q_view", "k_view", "v_view"} {
			base, v, chain, ok := f.readView(fused.Inputs[k])
			if !ok || len(chain) == 0 {
				continue
			}
			trial := cloneNode(fused)
			trial.Inputs[k] = base
			trial.Attrs = append(trial.Attrs, &ir.Attribute{Name: attr, Type: ir.AttrInts, Ints: v.Ints()})
			if f.inferMatches(schema, trial, st.node.Outputs[0]) {
				fused, reads = trial, append(reads, chain...)
			}
		}
		var writes []int
		if final, v, chain, ok := f.writeView(fused.Outputs[0]); ok && len(chain) > 0 {
			trial := cloneNode(fused)
			trial.Outputs[0] = final
			shape, _ := f.concreteShape(final)
			trial.Attrs = append(trial.Attrs,
				&ir.Attribute{Name: "out_shape", Type: ir.AttrInts, Ints: toInt64s(shape)},
				&ir.Attribute{Name: "out_view", Type: ir.AttrInts, Ints: v.Ints()})
			if f.inferMatches(schema, trial, final) {
				fused, writes = trial, chain
			}
		}
		outName := fused.Outputs[0]
		fs := step{index: st.index, node: fused, schema: schema, ctx: ops.Context{Opset: 1, Threads: st.ctx.Threads},
			outs: []int{slot[outName]}, want: []ir.TypeInfo{types[outName].Type}}
		for _, name := range fused.Inputs {
			fs.args = append(fs.args, slot[name])
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
		for _, k := range reads {
			readChains[pl.steps[k].node] = len(pl.fusions)
		}
		replace[i] = []step{fs}
		pl.fusions = append(pl.fusions, fusion)
	}
	if len(replace) == 0 {
		return
	}
	pl.steps = replaceSteps(pl.steps, replace, removed)
	p.dropDead(pl, readChains)
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
// exactly the concrete type the plan has for tensor out.
func (f *fuser) inferMatches(schema *ops.Schema, fused *ir.Node, out string) bool {
	in := make([]ops.Value, len(fused.Inputs))
	for k, name := range fused.Inputs {
		in[k] = f.types[name]
	}
	res, err := schema.Infer(fused, 1, in)
	return err == nil && len(res) == 1 && sameType(res[0].Type, f.types[out].Type)
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

// scalarConst returns the value of a float32 constant with one element.
func (f *fuser) scalarConst(name string) (float64, bool) {
	c := f.types[name].Const
	if c == nil || c.DType != ir.Float || c.Len() != 1 {
		return 0, false
	}
	return float64(c.Float32s()[0]), true
}

func (f *fuser) isFloat32(name string) bool { return f.types[name].Type.DType == ir.Float }

// match tries to read an attention chain ending in the MatMul at step i.
func (f *fuser) match(i int) (attnMatch, bool) {
	m := attnMatch{scale: 1, maskScale: 1}
	mm2 := f.pl.steps[i].node
	if len(mm2.Inputs) != 2 || len(mm2.Outputs) != 1 || !f.isFloat32(mm2.Inputs[0]) {
		return m, false
	}
	m.v = mm2.Inputs[1]
	si, sm, ok := f.internal(mm2.Inputs[0])
	if !ok || sm.OpType != "Softmax" || len(sm.Inputs) != 1 {
		return m, false
	}
	pt := f.types[sm.Outputs[0]].Type
	axis, err := sm.AttrInt("axis", -1)
	if err != nil || !pt.RankKnown || len(pt.Shape) < 2 {
		return m, false
	}
	if f.pl.steps[si].ctx.Opset < 13 && sm.Attr("axis") == nil {
		return m, false // before opset 13 the default axis is 1
	}
	if a, err := ops.NormAxis(axis, len(pt.Shape)); err != nil || a != len(pt.Shape)-1 {
		return m, false
	}
	m, ok = f.walk(sm.Inputs[0], m, 1, []int{i, si})
	return m, ok
}

// walk follows the scores chain back from tensor x (the input of the step
// last matched) to the first MatMul. m holds what is matched so far; post
// is the product of the scales met before any mask, i.e. applied after it;
// chain holds the matched steps, last executed first.
func (f *fuser) walk(x string, m attnMatch, post float64, chain []int) (attnMatch, bool) {
	k, n, ok := f.internal(x)
	if !ok {
		return m, false
	}
	chain = append(chain, k)
	switch n.OpType {
	case "MatMul":
		if len(n.Inputs) != 2 {
			return m, false
		}
		m.q = n.Inputs[0]
		kt := n.Inputs[1]
		m.k, m.kT = kt, true
		if ti, tn, ok := f.internal(kt); ok && tn.OpType == "Transpose" && len(tn.Inputs) == 1 && swapsLastTwo(tn, f.types[kt].Type) {
			m.k, m.kT = tn.Inputs[0], false
			chain = append(chain, ti)
		}
		for _, name := range []string{m.q, m.k, m.v} {
			if t := f.types[name].Type; !f.isFloat32(name) || !t.RankKnown || len(t.Shape) < 2 {
				return m, false
			}
		}
		m.scale *= post
		switch m.maskKind {
		case ops.MaskBoolTrueMasks, ops.MaskBoolFalseMasks:
			m.fill = float32(float64(m.fill) * post)
		case ops.MaskAdditive:
			m.maskScale = post
		}
		m.steps = append([]int{}, chain...)
		sort.Ints(m.steps)
		return m, validScale(m.scale)
	case "Div", "Mul":
		if len(n.Inputs) != 2 {
			return m, false
		}
		c, ok := f.scalarConst(n.Inputs[1])
		next := n.Inputs[0]
		if !ok && n.OpType == "Mul" {
			c, ok = f.scalarConst(n.Inputs[0])
			next = n.Inputs[1]
		}
		if !ok || !validScale(c) || !f.notWider(n, next) {
			return m, false
		}
		if n.OpType == "Div" {
			c = 1 / c
		}
		if m.maskKind == "" {
			post *= c
		} else {
			m.scale *= c
		}
		return f.walk(next, m, post, chain)
	case "Where":
		if m.maskKind != "" || len(n.Inputs) != 3 || f.types[n.Inputs[0]].Type.DType != ir.Bool {
			return m, false
		}
		m.mask = n.Inputs[0]
		if fill, ok := f.scalarConst(n.Inputs[1]); ok && f.notWider(n, n.Inputs[2]) {
			m.maskKind, m.fill = ops.MaskBoolTrueMasks, float32(fill)
			return f.walk(n.Inputs[2], m, post, chain)
		}
		if fill, ok := f.scalarConst(n.Inputs[2]); ok && f.notWider(n, n.Inputs[1]) {
			m.maskKind, m.fill = ops.MaskBoolFalseMasks, float32(fill)
			return f.walk(n.Inputs[1], m, post, chain)
		}
		return m, false
	case "Add":
		if m.maskKind != "" || len(n.Inputs) != 2 || n.Inputs[0] == n.Inputs[1] || !f.isFloat32(n.Inputs[0]) || !f.isFloat32(n.Inputs[1]) {
			return m, false
		}
		// Either operand may be the scores; try the first, then the second.
		for _, o := range [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}} {
			mm := m
			mm.maskKind, mm.mask = ops.MaskAdditive, o[1]
			if r, ok := f.walk(o[0], mm, post, chain); ok {
				return r, true
			}
		}
	}
	return m, false
}

// notWider reports whether node n's output has the shape of its input x,
// i.e. the other operands do not broadcast the scores to a larger shape.
func (f *fuser) notWider(n *ir.Node, x string) bool {
	return sameType(f.types[n.Outputs[0]].Type, f.types[x].Type)
}

// swapsLastTwo reports whether a Transpose swaps exactly the last two axes
// of its output type t.
func swapsLastTwo(n *ir.Node, t ir.TypeInfo) bool {
	if !t.RankKnown || len(t.Shape) < 2 {
		return false
	}
	r := len(t.Shape)
	perm, ok, err := n.AttrInts("perm")
	if err != nil {
		return false
	}
	if !ok {
		return r == 2 // the default reverses the axes
	}
	if len(perm) != r {
		return false
	}
	for i, v := range perm {
		want := int64(i)
		switch i {
		case r - 2:
			want = int64(r - 1)
		case r - 1:
			want = int64(r - 2)
		}
		if v != want {
			return false
		}
	}
	return true
}

func validScale(s float64) bool { return s != 0 && !math.IsInf(s, 0) && !math.IsNaN(s) }

// node builds the FusedAttention node replacing the chain; mm2 is the final
// MatMul, whose output it writes.
func (m attnMatch) node(mm2 *ir.Node, steps []step) *ir.Node {
	name := "FusedAttention"
	for _, k := range m.steps {
		if n := steps[k].node; n.OpType == "Softmax" && n.Name != "" {
			if i := strings.LastIndex(n.Name, "/"); i >= 0 {
				name = n.Name[:i+1] + "FusedAttention"
			} else {
				name = n.Name + "/FusedAttention"
			}
		}
	}
	n := &ir.Node{
		Name: name, OpType: ops.FusedAttentionOp, Domain: ops.DomainAttnrun,
		Inputs: []string{m.q, m.k, m.v}, Outputs: []string{mm2.Outputs[0]},
		Attrs: []*ir.Attribute{{Name: "scale", Type: ir.AttrFloat, Float: float32(m.scale)}},
	}
	if m.kT {
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "k_transposed", Type: ir.AttrInt, Int: 1})
	}
	if m.maskKind != "" {
		n.Inputs = append(n.Inputs, m.mask)
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "mask_kind", Type: ir.AttrString, String: []byte(m.maskKind)})
		if m.maskKind == ops.MaskAdditive {
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "mask_scale", Type: ir.AttrFloat, Float: float32(m.maskScale)})
		} else {
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "mask_fill", Type: ir.AttrFloat, Float: m.fill})
		}
	}
	n.Doc = "fused by attnrun from " + strings.Join(m.labels(steps), ", ")
	return n
}

func (m attnMatch) labels(steps []step) []string {
	var out []string
	for _, k := range m.steps {
		out = append(out, steps[k].node.Label())
	}
	return out
}
