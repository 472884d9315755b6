package graph

import (
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Scores that are a sum of two products.
//
// ESPnet's relative-position attention (LegacyRelPositionMultiHeadedAttention,
// the Conformer encoder's self-attention) scores each query against the
// keys and against the position embeddings and adds the two:
//
//	scores = (q_u·kᵀ + q_v·pᵀ) / sqrt(d_k)
//
// Exported, that is two MatMuls and an Add of their [B, H, Sq, Sk] results,
// which the attention fusion would read as one product and a full-size
// bias computed by a product of its own. But a sum of two products is one
// product of the concatenations: q_u·kᵀ + q_v·pᵀ = [q_u | q_v]·[k | p]ᵀ.
// mergeScoreSums rewrites
//
//	Add(MatMul(A1, B1), MatMul(A2, B2))   A [.., Sq, d1], B [.., d1, Sk], d2 likewise
//
// whose result a Softmax reads (through element-wise steps, the scale and
// masks) into MatMul(Concat(A1, A2), Concat(B1, B2)), before the attention
// fusion runs, which then fuses one product of head dim d1 + d2 and
// computes no [B, H, Sq, Sk] tensor at all. Where the operands are
// Transposes by the same permutation (the heads split from a projection's
// output), the Concat joins the tensors before them and a Transpose of the
// concatenation follows, which the fused node reads as a view; an operand
// whose batch dims are 1 where the other's are not (ESPnet's position
// embeddings, batch 1) is expanded first. The products' sum is the same up
// to rounding (the d1 + d2 terms are summed in one accumulation).
// Options.NoFuse turns it off, with every other rewrite.

// scoreSumReach is how many element-wise steps may lie between the Add and
// the Softmax.
const scoreSumReach = 6

// scoreSumOpset is the opset of the Concat, Transpose, Expand and MatMul
// steps the rewrite adds.
const scoreSumOpset = 13

// mergeScoreSums rewrites pl.steps in place and records the rewrites in
// pl.fusions.
func (p *Program) mergeScoreSums(pl *plan, types map[string]ops.Value) {
	schema, err := ops.Lookup("", "MatMul", scoreSumOpset)
	if err != nil {
		return
	}
	f := newFuser(p, pl, types)
	replace := map[int][]step{}
	readChains := map[*ir.Node]int{}
	for i := range pl.steps {
		add := pl.steps[i].node
		if add.OpType != "Add" || !isDefaultDomain(add) || len(add.Inputs) != 2 || len(add.Outputs) != 1 || add.Outputs[0] == "" || !f.reachesSoftmax(add.Outputs[0]) {
			continue
		}
		i1, mm1, ok1 := f.internal(add.Inputs[0])
		i2, mm2, ok2 := f.internal(add.Inputs[1])
		if !ok1 || !ok2 || i1 == i2 || mm1.OpType != "MatMul" || mm2.OpType != "MatMul" || f.removed[i1] || f.removed[i2] {
			continue
		}
		added := &addedNodes{}
		mm, reads, ok := f.mergedProduct(add, mm1, mm2, added)
		if !ok {
			continue
		}
		out := add.Outputs[0]
		ms := step{index: pl.steps[i].index, node: mm, schema: schema, ctx: ops.Context{Opset: scoreSumOpset, Threads: pl.steps[i].ctx.Threads},
			args: []int{f.slotOf(mm.Inputs[0]), f.slotOf(mm.Inputs[1])}, outs: []int{f.slot[out]}, want: []ir.TypeInfo{types[out].Type}}
		fusion := Fusion{Node: mm, Nodes: append(slices.Clone(added.pre), mm)}
		for range fusion.Nodes {
			fusion.Opsets = append(fusion.Opsets, scoreSumOpset)
		}
		for _, k := range []int{i1, i2, i} {
			fusion.Replaced = append(fusion.Replaced, pl.steps[k].node)
			f.removed[k] = true
		}
		for _, k := range reads {
			readChains[pl.steps[k].node] = len(pl.fusions)
		}
		replace[i] = f.addedSteps(*added, ms, i)
		pl.fusions = append(pl.fusions, fusion)
	}
	if len(replace) == 0 {
		return
	}
	pl.steps = replaceSteps(pl.steps, replace, f.removed)
	p.dropDead(pl, readChains)
}

// reachesSoftmax reports whether tensor t is read, through at most
// scoreSumReach element-wise or reshaping steps each the only reader of
// the one before, by a Softmax.
func (f *fuser) reachesSoftmax(t string) bool {
	for range scoreSumReach {
		k, ok := f.consumer(t)
		if !ok {
			return false
		}
		n := f.pl.steps[k].node
		if !isDefaultDomain(n) || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			return false
		}
		switch n.OpType {
		case "Softmax":
			return true
		case "Mul", "Div", "Add", "Sub", "Where", "Cast", "Reshape":
			t = n.Outputs[0]
		default:
			return false
		}
	}
	return false
}

// mergedProduct returns the MatMul computing add, the sum of the products
// mm1 and mm2, from the concatenation of their operands, with the nodes
// computing the concatenations in added and the steps it reads through
// (the operands' Transposes, when nothing else reads them, become dead);
// ok is false where the operands do not concatenate.
func (f *fuser) mergedProduct(add, mm1, mm2 *ir.Node, added *addedNodes) (*ir.Node, []int, bool) {
	out := add.Outputs[0]
	want, ok := f.concreteShape(out)
	if !ok || len(want) < 2 {
		return nil, nil, false
	}
	for _, mm := range []*ir.Node{mm1, mm2} {
		if len(mm.Inputs) != 2 || !f.isFloat32(mm.Inputs[0]) || !f.isFloat32(mm.Inputs[1]) {
			return nil, nil, false
		}
		if s, ok := f.concreteShape(mm.Outputs[0]); !ok || !slices.Equal(s, want) {
			return nil, nil, false // the Add broadcasts
		}
	}
	r := len(want)
	a, readsA, ok := f.concatOperands(add.Name+"/products_a", mm1.Inputs[0], mm2.Inputs[0], r-1, added)
	if !ok {
		return nil, nil, false
	}
	b, readsB, ok := f.concatOperands(add.Name+"/products_b", mm1.Inputs[1], mm2.Inputs[1], r-2, added)
	if !ok {
		return nil, nil, false
	}
	mm := &ir.Node{Name: ops.AttentionTempPrefix + add.Name + "/products", OpType: "MatMul", Inputs: []string{a, b}, Outputs: []string{out},
		Doc: "the sum of " + mm1.Label() + " and " + mm2.Label() + " as one product of the concatenated operands"}
	if !f.infersTo(mm, out) {
		return nil, nil, false
	}
	return mm, append(readsA, readsB...), true
}

// concatOperands adds to added the nodes joining tensors x1 and x2 (of
// rank r, equal dims but along axis and their batch dims, which
// broadcast) along axis, and returns the joined tensor's name. Where both
// are Transposes by the same permutation, the tensors before them are
// joined along the axis the permutation moves to axis, and the result
// transposed; the Transposes are returned as the steps read through.
func (f *fuser) concatOperands(name, x1, x2 string, axis int, added *addedNodes) (string, []int, bool) {
	s1, ok1 := f.concreteShape(x1)
	s2, ok2 := f.concreteShape(x2)
	if !ok1 || !ok2 || len(s1) != len(s2) {
		return "", nil, false
	}
	var perm []int
	var reads []int
	t1, p1, ok1 := f.transposeOf(x1)
	t2, p2, ok2 := f.transposeOf(x2)
	if ok1 && ok2 && slices.Equal(p1, p2) {
		perm, reads = p1, []int{f.producer[x1], f.producer[x2]}
		x1, x2, axis = t1, t2, p1[axis]
		s1, _ = f.concreteShape(x1)
		s2, _ = f.concreteShape(x2)
	}
	// Every dim but axis must agree, a batch dim (before the last two of
	// the product's operand) possibly by broadcasting one side.
	batch := map[int]bool{}
	for k := 0; k < len(s1)-2; k++ {
		if perm != nil {
			batch[perm[k]] = true
		} else {
			batch[k] = true
		}
	}
	full1, full2 := slices.Clone(s1), slices.Clone(s2)
	for k := range s1 {
		switch {
		case k == axis || s1[k] == s2[k]:
		case batch[k] && s1[k] == 1:
			full1[k] = s2[k]
		case batch[k] && s2[k] == 1:
			full2[k] = s1[k]
		default:
			return "", nil, false
		}
	}
	x1 = f.expandedTo(name+"/expanded_1", x1, full1, added)
	x2 = f.expandedTo(name+"/expanded_2", x2, full2, added)
	cat := ops.AttentionTempPrefix + name
	joined := slices.Clone(full1)
	joined[axis] = full1[axis] + full2[axis]
	concat := &ir.Node{Name: cat, OpType: "Concat", Inputs: []string{x1, x2}, Outputs: []string{cat},
		Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: int64(axis)}}, Doc: "the two products' operands, joined"}
	if !f.addTyped(concat, added) {
		return "", nil, false
	}
	if perm == nil {
		return cat, nil, true
	}
	tr := cat + "/transposed"
	transpose := &ir.Node{Name: tr, OpType: "Transpose", Inputs: []string{cat}, Outputs: []string{tr},
		Attrs: []*ir.Attribute{intsAttr("perm", toInt64s(perm))}, Doc: "the joined operands in the products' layout"}
	if !f.addTyped(transpose, added) {
		return "", nil, false
	}
	return tr, reads, true
}

// transposeOf returns the input and permutation of the Transpose step
// producing x.
func (f *fuser) transposeOf(x string) (string, []int, bool) {
	k, ok := f.producer[x]
	if !ok || f.removed[k] {
		return "", nil, false
	}
	n := f.pl.steps[k].node
	if n.OpType != "Transpose" || !isDefaultDomain(n) || len(n.Inputs) != 1 {
		return "", nil, false
	}
	s, ok := f.concreteShape(n.Inputs[0])
	if !ok {
		return "", nil, false
	}
	perm, ok := transposePerm(n, len(s))
	return n.Inputs[0], perm, ok
}

// expandedTo returns x expanded to shape (x itself when it has it), adding
// the Expand to added.
func (f *fuser) expandedTo(name, x string, shape []int, added *addedNodes) string {
	if s, _ := f.concreteShape(x); slices.Equal(s, shape) {
		return x
	}
	out := ops.AttentionTempPrefix + name
	dims := f.shapeConst(out+"/shape", shape)
	expand := &ir.Node{Name: out, OpType: "Expand", Inputs: []string{x, dims}, Outputs: []string{out}, Doc: "broadcast over the batch to join the other product's operand"}
	if !f.addTyped(expand, added) {
		return x
	}
	return out
}

// addTyped puts the type of node n's output in the plan's types and n in
// added.
func (f *fuser) addTyped(n *ir.Node, added *addedNodes) bool {
	schema, t, ok := f.inferAdded(n)
	if !ok {
		return false
	}
	f.types[n.Outputs[0]] = ops.Value{Type: t}
	added.add(false, n, schema, scoreSumOpset)
	return true
}

// infersTo reports whether node mm gives tensor out's type.
func (f *fuser) infersTo(mm *ir.Node, out string) bool {
	_, t, ok := f.inferAdded(mm)
	return ok && sameType(t, f.types[out].Type)
}

// inferAdded returns the schema (at scoreSumOpset) of a node the rewrite
// adds and the concrete type of its one output.
func (f *fuser) inferAdded(n *ir.Node) (*ops.Schema, ir.TypeInfo, bool) {
	schema, err := ops.Lookup("", n.OpType, scoreSumOpset)
	if err != nil {
		return nil, ir.TypeInfo{}, false
	}
	in := make([]ops.Value, len(n.Inputs))
	for k, x := range n.Inputs {
		in[k] = f.types[x]
	}
	res, err := schema.Infer(n, scoreSumOpset, in)
	if err != nil || len(res) != 1 {
		return nil, ir.TypeInfo{}, false
	}
	if _, ok := res[0].Type.Shape.Concrete(); !ok {
		return nil, ir.TypeInfo{}, false
	}
	return schema, res[0].Type, true
}
