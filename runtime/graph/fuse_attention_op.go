package graph

import (
	"fmt"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Attention op rewrite.
//
// ONNX's Attention op (opsets 23, 24) has no kernel of its own: ops.
// LowerAttention turns a node into one com.attnrun:FusedAttention node and
// the standard nodes around it (KV-cache Concat, the head split a 3-D K or
// V needs for the cache, Casts for element types other than float32). At
// plan time, before the primitive-op attention fusion, each Attention step
// is replaced by the steps of its lowering, so that models using Attention
// and models spelling attention out in primitive ops run the same kernel
// the same way: like the primitive fusion, the FusedAttention step reads
// Q, K and V through views of the movement steps before them (a Split of
// a fused QKV projection, a Reshape), which then drop out. Every rewrite
// is recorded as a Fusion whose Nodes lists the steps it added; an
// Attention node left as is (Options.NoFuse, or a lowering that failed)
// runs its own kernel, which runs the same lowering, and
// Program.AttentionKernels says why.

// AttentionKernel says how one Attention node of the graph runs in a plan.
type AttentionKernel struct {
	// Node is the Attention node.
	Node *ir.Node
	// Fused is the com.attnrun:FusedAttention step it became, nil when it
	// was not rewritten.
	Fused *ir.Node
	// Reason says why it was not rewritten (empty when it was).
	Reason string
}

// AttentionKernels returns, for every Attention node of the graph, how it
// runs for the given inputs' shapes (building and caching the plan).
func (p *Program) AttentionKernels(inputs map[string]*ir.Tensor) ([]AttentionKernel, error) {
	pl, err := p.planFor(inputs)
	if err != nil {
		return nil, err
	}
	defer p.donePlan(pl)
	var out []AttentionKernel
	for _, n := range p.Order {
		if n.OpType != "Attention" || !isDefaultDomain(n) {
			continue
		}
		k := AttentionKernel{Node: n, Reason: pl.attnReasons[n]}
		for _, f := range pl.fusions {
			if len(f.Replaced) == 1 && f.Replaced[0] == n {
				k.Fused = f.Node
			}
		}
		switch {
		case k.Fused != nil:
		case p.opts.NoFuse:
			k.Reason = "graph rewrites are off: --no-fuse"
		case pl.folds(n):
			k.Reason = "folded at compile time (constant inputs)"
		case k.Reason == "":
			k.Reason = "not rewritten"
		}
		out = append(out, k)
	}
	return out, nil
}

// rewriteAttentionOps replaces every Attention step of the plan by the
// steps of its lowering and records each as a Fusion.
func (p *Program) rewriteAttentionOps(pl *plan, types map[string]ops.Value) {
	var f *fuser
	replace := map[int][]step{}
	readChains := map[*ir.Node]int{}
	for i, st := range pl.steps {
		n := st.node
		if n.OpType != "Attention" || !isDefaultDomain(n) {
			continue
		}
		if f == nil {
			f = newFuser(p, pl, types)
		}
		steps, fusion, reads, err := f.lowerAttention(st)
		if err != nil {
			if pl.attnReasons == nil {
				pl.attnReasons = map[*ir.Node]string{}
			}
			pl.attnReasons[n] = err.Error()
			continue
		}
		for _, k := range reads {
			readChains[pl.steps[k].node] = len(pl.fusions)
		}
		replace[i] = steps
		pl.fusions = append(pl.fusions, fusion)
	}
	if len(replace) == 0 {
		return
	}
	pl.steps = replaceSteps(pl.steps, replace, nil)
	p.dropDead(pl, readChains)
}

// lowerAttention builds the steps replacing Attention step st: the
// lowering's nodes with types inferred in order, new slots for the tensors
// they make, and Q, K and V read through the movement steps before them
// where views allow. reads lists those movement steps.
func (f *fuser) lowerAttention(st step) (steps []step, fusion Fusion, reads []int, err error) {
	n := st.node
	in := make([]ops.Value, len(n.Inputs))
	for k, name := range n.Inputs {
		if name != "" {
			in[k] = f.types[name]
		}
	}
	low, err := ops.LowerAttention(n, in)
	if err != nil {
		return nil, Fusion{}, nil, fmt.Errorf("lowering: %w", err)
	}
	// Infer every new tensor first; commit nothing until all fit.
	local, err := low.Types(func(name string) (ops.Value, bool) {
		v, ok := f.types[name]
		return v, ok
	})
	if err != nil {
		return nil, Fusion{}, nil, err
	}
	typeOf := func(name string) (ops.Value, bool) {
		if v, ok := local[name]; ok {
			return v, true
		}
		v, ok := f.types[name]
		return v, ok
	}
	// Read Q, K and V through the movement steps producing them.
	fused := low.Fused
	for k, attr := range []string{"q_view", "k_view", "v_view"} {
		name := fused.Inputs[k]
		if strings.HasPrefix(name, ops.AttentionTempPrefix) {
			continue
		}
		base, v, chain, ok := f.readView(name)
		if !ok || len(chain) == 0 {
			continue
		}
		if h := low.Heads[k]; h > 0 {
			if v, ok = ops.HeadSplitView(v, h); !ok {
				continue
			}
		}
		trial := cloneNode(fused)
		trial.Inputs[k] = base
		trial.Attrs = withAttr(trial.Attrs, &ir.Attribute{Name: attr, Type: ir.AttrInts, Ints: v.Ints()})
		if f.sameOutputs(trial, fused, typeOf) {
			fused, reads = trial, append(reads, chain...)
		}
	}
	var opsets []int
	nodes := make([]*ir.Node, len(low.Nodes))
	for i, node := range low.Nodes {
		opsets = append(opsets, low.Opsets[node])
		if node == low.Fused {
			node = fused
		}
		nodes[i] = node
		schema, err := ops.Lookup(node.Domain, node.OpType, opsets[i])
		if err != nil {
			return nil, Fusion{}, nil, err
		}
		steps = append(steps, step{index: st.index, node: node, schema: schema, ctx: ops.Context{Opset: opsets[i], Threads: st.ctx.Threads}})
	}
	// Commit: the new tensors' types, then slots in step order.
	for name, v := range local {
		f.types[name] = v
	}
	for i := range steps {
		s := &steps[i]
		for _, name := range s.node.Inputs {
			if name == "" {
				s.args = append(s.args, -1)
				continue
			}
			slot := f.slotOf(name)
			if c := low.Consts[name]; c != nil {
				f.pl.consts[slot] = c
			}
			s.args = append(s.args, slot)
		}
		for _, name := range s.node.Outputs {
			if name == "" {
				s.outs, s.want = append(s.outs, -1), append(s.want, ir.TypeInfo{})
			} else {
				s.outs, s.want = append(s.outs, f.slotOf(name)), append(s.want, f.types[name].Type)
			}
		}
	}
	fusion = Fusion{Node: fused, Replaced: []*ir.Node{n}}
	if len(nodes) > 1 {
		fusion.Nodes, fusion.Opsets = nodes, opsets
	}
	return steps, fusion, reads, nil
}

// slotOf returns the plan slot of a tensor: one the plan already has
// (including the slots of tensors only the replaced step read or wrote).
func (f *fuser) slotOf(name string) int {
	if s, ok := f.slot[name]; ok {
		return s
	}
	s := f.pl.nslots
	f.pl.nslots++
	f.slot[name] = s
	return s
}

// sameOutputs reports whether FusedAttention node trial infers exactly the
// output types of node ref (the reads through views change nothing else).
func (f *fuser) sameOutputs(trial, ref *ir.Node, typeOf func(string) (ops.Value, bool)) bool {
	schema, err := ops.Lookup(ops.DomainAttnrun, ops.FusedAttentionOp, 1)
	if err != nil {
		return false
	}
	infer := func(n *ir.Node) ([]ops.Value, bool) {
		vals := make([]ops.Value, len(n.Inputs))
		for k, name := range n.Inputs {
			if name == "" {
				continue
			}
			v, ok := typeOf(name)
			if !ok {
				return nil, false
			}
			vals[k] = v
		}
		res, err := schema.Infer(n, 1, vals)
		return res, err == nil
	}
	a, ok1 := infer(trial)
	b, ok2 := infer(ref)
	if !ok1 || !ok2 || len(a) != len(b) {
		return false
	}
	for k := range a {
		if !sameType(a[k].Type, b[k].Type) {
			return false
		}
	}
	return true
}

// withAttr returns attrs with a replacing the attribute of the same name
// (or appended).
func withAttr(attrs []*ir.Attribute, a *ir.Attribute) []*ir.Attribute {
	for i, x := range attrs {
		if x.Name == a.Name {
			attrs[i] = a
			return attrs
		}
	}
	return append(attrs, a)
}
