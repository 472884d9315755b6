package graph

import (
	"math"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// L2 normalization rewrite.
//
// F.normalize(x, p=2, dim=-1, eps) exports as
//
//	n = ReduceL2(x, axes)      axes: the last k, keepdims=1
//	n = Clip(n, eps)           (absent for x / x.norm(dim=-1, keepdim=True))
//	y = Div(x, n)              (after dropBroadcastExpands: the export's
//	                            Expand of n to x's shape is gone)
//
// Swin V2's cosine attention normalizes q and k so, CLIP-style models
// their embeddings, sentence-transformers' Normalize layer its output.
// Every such float32 chain whose intermediates nothing else reads, with a
// scalar constant eps ≥ 0 as the Clip's only bound, becomes one
// com.attnrun:NormalizeL2 step (ops/normalize_l2.go): one pass over x
// instead of three steps, with the chain's bits. Where x is a movement of
// another tensor (Swin V2's q is a Gather of a Transpose of a Reshape of
// the qkv projection) and nothing else reads x, the step reads that
// tensor through a strided view (views.go), and the movement steps drop
// out when nothing else reads them. Options.NoFuse turns it off.

// fuseL2Norms rewrites pl.steps in place and records the rewrites in
// pl.fusions.
func (p *Program) fuseL2Norms(pl *plan, types map[string]ops.Value) {
	schema, err := ops.Lookup(ops.DomainAttnrun, ops.NormalizeL2Op, 1)
	if err != nil {
		return
	}
	f := newFuser(p, pl, types)
	replace := map[int][]step{}
	readChains := map[*ir.Node]int{}
	for i, st := range pl.steps {
		m, ok := f.matchL2Norm(i)
		if !ok {
			continue
		}
		n := &ir.Node{
			Name: st.node.Name + "/" + ops.NormalizeL2Op, OpType: ops.NormalizeL2Op, Domain: ops.DomainAttnrun,
			Inputs: []string{m.x}, Outputs: []string{m.out},
			Attrs: []*ir.Attribute{
				{Name: "axis", Type: ir.AttrInt, Int: int64(-m.k)},
				{Name: "epsilon", Type: ir.AttrFloat, Float: m.eps},
			},
			Doc: "fused by attnrun from the exported L2 normalization " + st.node.Label(),
		}
		if !f.inferMatches(schema, n, m.out) {
			continue
		}
		var reads []int
		if f.uses[m.x] == 2 { // only the ReduceL2 and the Div read x
			n, reads = f.readInputThrough(schema, n, 0, "x_view", m.out, func(ops.View) bool { return true })
		}
		for _, k := range reads {
			readChains[pl.steps[k].node] = len(pl.fusions)
		}
		f.replaceChain(n, schema, 1, st.ctx.Threads, m.steps, replace)
	}
	if len(replace) == 0 {
		return
	}
	pl.steps = replaceSteps(pl.steps, replace, f.removed)
	p.dropDead(pl, readChains)
}

// l2NormMatch is one exported L2 normalization: its input, output,
// epsilon (0 without a Clip), the number k of trailing axes it
// normalizes, and the steps it replaces.
type l2NormMatch struct {
	x, out string
	eps    float32
	k      int
	steps  []int
}

// matchL2Norm matches the L2 normalization chain starting at the ReduceL2
// step i.
func (f *fuser) matchL2Norm(i int) (l2NormMatch, bool) {
	var m l2NormMatch
	red := f.pl.steps[i].node
	if f.removed[i] || red.OpType != "ReduceL2" || !isDefaultDomain(red) || len(red.Outputs) != 1 || red.Outputs[0] == "" || len(red.Inputs) == 0 {
		return m, false
	}
	m.x = red.Inputs[0]
	xt := f.types[m.x].Type
	if !f.isFloat32(m.x) || !xt.RankKnown {
		return m, false
	}
	var ok bool
	if m.k, ok = f.trailingAxes(red, len(xt.Shape)); !ok {
		return m, false
	}
	m.steps = []int{i}
	norm := red.Outputs[0]
	if ci, ok := f.consumer(norm); ok && f.pl.steps[ci].node.OpType == "Clip" {
		clip := f.pl.steps[ci].node
		eps, ok := f.clipFloor(clip, f.pl.steps[ci].ctx.Opset)
		if !ok {
			return m, false
		}
		m.eps, norm, m.steps = eps, clip.Outputs[0], append(m.steps, ci)
	}
	di, div, ok := f.lnStep(norm, "Div")
	if !ok || div.Inputs[0] != m.x || div.Inputs[1] != norm {
		return m, false
	}
	m.out, m.steps = div.Outputs[0], append(m.steps, di)
	return m, sameType(f.types[m.out].Type, xt)
}

// clipFloor returns the lower bound of a Clip (opset ≥ 11) that has only
// one: a float32 scalar constant, finite and ≥ 0 (a norm's floor).
func (f *fuser) clipFloor(clip *ir.Node, opset int) (float32, bool) {
	if !isDefaultDomain(clip) || len(clip.Outputs) != 1 || clip.Outputs[0] == "" || opset < 11 ||
		len(clip.Inputs) < 2 || len(clip.Inputs) > 3 || (len(clip.Inputs) == 3 && clip.Inputs[2] != "") {
		return 0, false
	}
	eps, ok := f.scalarConst(clip.Inputs[1])
	if !ok || eps < 0 || math.IsInf(eps, 0) || math.IsNaN(eps) {
		return 0, false
	}
	return float32(eps), true
}
