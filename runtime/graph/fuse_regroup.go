package graph

import (
	"slices"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Batch-regrouping Reshapes inside the attention chain.
//
// Some exports reshape the scores, or the weights P, between the two
// products, keeping the last two dims (Sq, Sk) and regrouping only the
// batch dims before them:
//
//	Swin's WindowAttention  scores [B_, H, N, N] + the position bias,
//	                        viewed as [B_/nW, nW, H, N, N] + the window
//	                        mask [1, nW, 1, N, N], viewed back as
//	                        [B_, H, N, N], Softmax, · V [B_, H, N, D]
//	BLOOM                   scores [B·H, S, S] (baddbmm: + ALiBi
//	                        [B·H, 1, S]) viewed as [B, H, S, S],
//	                        masked_fill, Softmax, P viewed as
//	                        [B·H, S, S], · V [B·H, S, D]
//
// Such a Reshape (or Squeeze, Unsqueeze, Flatten) moves no matrix: batch
// matrix b of its input, counted row-major, is batch matrix b of its
// output. The matcher (fuse_chain.go) passes it on the scores and on P;
// the fused node then works in the finest batch shape that every batch
// shape of the chain regroups (their cumulative products merged:
// [B_/nW, nW, H] for Swin, [B, H] for BLOOM), and
//
//   - reads Q, K and V through views with their batch axes split to it (an
//     axis of a strided view always splits). A Reshape making the operand
//     that merges batch axes no view can merge (BLOOM's
//     q.transpose(1, 2).reshape(B·H, S, D)) is read as one reshape of its
//     input straight to the finer shape: reshaping twice is reshaping once;
//   - takes each mask and bias broadcast to it, seen from the scores it
//     applies to: a batch dim of 1 becomes 1s, a full one the dims it
//     splits into. Where that takes more than leading 1s (BLOOM's ALiBi
//     [B·H, 1, S] is [B, H, 1, S]), the fused node reads a Reshape of the
//     mask, a step added before it that runs as a view of the mask's data
//     (memory.go): nothing is copied. Fusions that read the same mask so
//     share one such step;
//   - writes O in O's own shape, through out_shape and out_view; and the
//     weights, when other steps read them (need_weights, attention maps),
//     in its own batch shape, as a tensor that a Reshape step after it
//     gives the weights' shape (the same elements in the same order: a
//     view again).
//
// A chain whose batch shapes have no common refinement ([2, 3] and
// [3, 2] group different matrices), whose K or V is repeated over grouped
// heads, or whose einsum P·V permutes its output stays unfused; so does
// any other case where the fused node's own inference does not give O's
// shape.

// regroupReshapeOpset is the opset of the Reshape steps a regrouping adds.
const regroupReshapeOpset = 14

// regroupsBatch reports whether reshape-like node n keeps the last two dims
// of its float32 input and only regroups the dims before them.
func (f *fuser) regroupsBatch(n *ir.Node) bool {
	if !reshapeLike(n) || n.OpType == "Identity" || len(n.Inputs) == 0 || len(n.Outputs) != 1 || !f.isFloat32(n.Inputs[0]) || !f.isFloat32(n.Outputs[0]) {
		return false
	}
	in, ok1 := f.concreteShape(n.Inputs[0])
	out, ok2 := f.concreteShape(n.Outputs[0])
	if !ok1 || !ok2 || len(in) < 2 || len(out) < 2 || slices.Contains(in, 0) || slices.Contains(out, 0) {
		return false
	}
	return slices.Equal(in[len(in)-2:], out[len(out)-2:]) && ops.ShapeElems(in) == ops.ShapeElems(out)
}

// maskScores returns the scores tensor the match's first mask applies to
// (the product of Q and K when it has none).
func (m attnMatch) maskScores() string {
	if len(m.masks) > 0 && m.masks[0].at != "" {
		return m.masks[0].at
	}
	return m.scores
}

// regrouping is how a chain with regrouping Reshapes is fused: in the
// finest batch shape fine, Q and K being given in the batch shape qk (the
// scores product's output's), V and O in pv (P's). lead is how many
// leading 1s the fused node's result has beyond fine: a mask read as it
// is may have more batch dims, all leading 1s.
type regrouping struct {
	fine, qk, pv []int
	lead         int
}

// shape returns the logical shape of operand k (0 Q, 1 K, 2 V or O) in
// the fine batch shape.
func (r *regrouping) shape(k int, shape []int) ([]int, bool) {
	frame := r.qk
	if k >= 2 {
		frame = r.pv
	}
	return regroupShape(shape, frame, r.fine)
}

// resultShape returns the shape of the fused node's result for O's shape
// out: O's batch axes split to the fine batch shape, after lead 1s.
func (r *regrouping) resultShape(out []int) ([]int, bool) {
	want, ok := r.shape(2, out)
	if !ok {
		return nil, false
	}
	return append(ones(r.lead), want...), true
}

// ones returns n 1s.
func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// outView returns v, the view of O's elements in the tensor the fused node
// writes, as the view of the fused node's result.
func (r *regrouping) outView(v ops.View) (ops.View, bool) {
	want, ok := r.resultShape(v.Shape)
	if !ok {
		return ops.View{}, false
	}
	return v.Reshape(want)
}

// addedNodes are the nodes a fusion runs besides its fused node, before
// it (pre) and after it (post), each with the schema and opset it runs
// with: masks computed before their broadcast (fuse_narrow.go), Q times a
// per-head scale (fuse_head_scale.go), Reshapes to and from a regrouped
// batch.
type addedNodes struct {
	pre, post []*ir.Node
	schemas   map[*ir.Node]*ops.Schema
	opsets    map[*ir.Node]int
}

// add appends n to pre (or post), run with schema s at opset.
func (a *addedNodes) add(post bool, n *ir.Node, s *ops.Schema, opset int) {
	if a.schemas == nil {
		a.schemas, a.opsets = map[*ir.Node]*ops.Schema{}, map[*ir.Node]int{}
	}
	if post {
		a.post = append(a.post, n)
	} else {
		a.pre = append(a.pre, n)
	}
	a.schemas[n], a.opsets[n] = s, opset
}

// madeOrAdded reports whether tensor name is computed already: by a node
// an earlier fusion added, or by one of added's before the fused node.
func (f *fuser) madeOrAdded(name string, added *addedNodes) bool {
	if _, made := f.made[name]; made {
		return true
	}
	return slices.ContainsFunc(added.pre, func(p *ir.Node) bool { return p.Outputs[0] == name })
}

// regroup works out how match m, with regrouping Reshapes, is fused (nil
// when it has none): its batch shapes, and m with each mask and bias that
// broadcasting alone does not fit to the fine batch shape replaced by its
// Reshape to it, and the weights, when it writes them, by a tensor of the
// fused node's shape; with the Reshape nodes to run before the fused node
// (none for one an earlier fusion added) and after it. ok is false when
// the chain cannot be fused in one batch shape. The Reshapes go to added.
func (f *fuser) regroup(m attnMatch, added *addedNodes) (*regrouping, attnMatch, bool) {
	if len(m.regroups) == 0 {
		return nil, m, true
	}
	if m.outPerm != nil || m.k.grouped || m.v.grouped {
		return nil, m, false
	}
	reshape, err := ops.Lookup(ops.DomainONNX, "Reshape", regroupReshapeOpset)
	if err != nil {
		return nil, m, false
	}
	r := &regrouping{}
	var ok1, ok2, ok3 bool
	var ob []int
	r.qk, ok1 = f.batchOf(m.scores)
	r.pv, ok2 = f.batchOf(m.pv.Inputs[m.pIn])
	ob, ok3 = f.batchOf(m.pv.Outputs[0])
	if !ok1 || !ok2 || !ok3 || !slices.Equal(ob, r.pv) {
		return nil, m, false // V widens P's batch
	}
	frames := [][]int{r.qk, r.pv}
	for _, k := range m.regroups {
		n := f.pl.steps[k].node
		in, ok1 := f.batchOf(n.Inputs[0])
		out, ok2 := f.batchOf(n.Outputs[0])
		if !ok1 || !ok2 {
			return nil, m, false
		}
		frames = append(frames, in, out)
	}
	var ok bool
	if r.fine, ok = finestBatch(frames); !ok {
		return nil, m, false
	}
	m.masks = slices.Clone(m.masks)
	for i := range m.masks {
		st := &m.masks[i]
		if st.name == "" {
			continue
		}
		shape, want, ok := f.fineShape(st.name, st.at, r.fine)
		if !ok {
			return nil, m, false
		}
		if slices.Equal(trimLeadingOnes(shape), trimLeadingOnes(want)) {
			r.lead = max(r.lead, len(shape)-2-len(r.fine))
			continue // broadcasting reads it as it is
		}
		name := regroupedName(st.name, want)
		if !f.madeOrAdded(name, added) {
			added.add(false, f.reshapeNode(st.name, name, want, "mask "+st.name+" seen in the fused attention's batch shape"), reshape, regroupReshapeOpset)
		}
		st.name = name
	}
	if m.weights != "" {
		shape, want, ok := f.fineShape(m.weights, m.weights, r.fine)
		if !ok {
			return nil, m, false
		}
		if want = append(ones(r.lead), want...); !slices.Equal(want, shape) {
			name := regroupedName(m.weights, want)
			f.types[name] = ops.Value{Type: ops.Known(ir.Float, want)}
			added.add(true, f.reshapeNode(name, m.weights, shape, "the weights the fused attention writes, in their own shape"), reshape, regroupReshapeOpset)
			m.weights = name
		}
	}

	return r, m, true
}

// regroupedName names tensor name seen in another shape.
func regroupedName(name string, shape []int) string {
	return ops.AttentionTempPrefix + name + "/regrouped_" + ir.ShapeString(shape)
}

// reshapeNode returns a Reshape of tensor in to out, of the given shape
// (what says what out is), named after the one of the two the fusion
// makes, and puts out's type and the shape, a constant, into the plan's
// types.
func (f *fuser) reshapeNode(in, out string, shape []int, what string) *ir.Node {
	name := out
	if strings.HasPrefix(in, ops.AttentionTempPrefix) {
		name = in
	}
	dims := f.shapeConst(name+"/shape", shape)
	f.types[out] = ops.Value{Type: ops.Known(f.types[in].Type.DType, shape)}
	return &ir.Node{Name: name, OpType: "Reshape", Inputs: []string{in, dims}, Outputs: []string{out},
		Doc: what + ", [" + ir.ShapeString(shape) + "] (a view of the same data, no copy)"}
}

// shapeConst puts a constant int64 tensor holding shape into the plan's
// types under name (a Reshape's or Expand's shape input) and returns name.
func (f *fuser) shapeConst(name string, shape []int) string {
	f.types[name] = ops.Value{Type: ops.Known(ir.Int64, []int{len(shape)}), Const: ir.FromSlice([]int{len(shape)}, toInt64s(shape))}
	return name
}

// readyBefore reports whether the inputs of nodes are computed before step
// pos: by a step before it, or by steps an earlier fusion added before it
// or at it (made).
func (f *fuser) readyBefore(nodes []*ir.Node, pos int) bool {
	for _, n := range nodes {
		for _, in := range n.Inputs {
			if k, ok := f.producer[in]; ok && in != "" && k >= pos {
				return false
			}
			if at, ok := f.made[in]; ok && at > pos {
				return false
			}
		}
	}
	return true
}

// addedSteps returns the steps of a fusion in order: those of added.pre,
// its fused step fs, those of added.post; and records the tensors
// added.pre computes as made before step pos.
func (f *fuser) addedSteps(added addedNodes, fs step, pos int) []step {
	var steps []step
	for _, n := range slices.Concat(added.pre, []*ir.Node{fs.node}, added.post) {
		if n == fs.node {
			steps = append(steps, fs)
			continue
		}
		st := step{index: fs.index, node: n, schema: added.schemas[n], ctx: ops.Context{Opset: added.opsets[n], Threads: fs.ctx.Threads}}
		for _, name := range n.Inputs {
			if name == "" {
				st.args = append(st.args, -1)
				continue
			}
			s := f.slotOf(name)
			if c := f.types[name].Const; c != nil {
				f.pl.consts[s] = c
			}
			st.args = append(st.args, s)
		}
		out := n.Outputs[0]
		st.outs, st.want = []int{f.slotOf(out)}, []ir.TypeInfo{f.types[out].Type}
		steps = append(steps, st)
	}
	for _, n := range added.pre {
		if f.made == nil {
			f.made = map[string]int{}
		}
		f.made[n.Outputs[0]] = pos
	}
	return steps
}

// stepNodes lists the nodes of steps with their opsets (Fusion.Nodes and
// Fusion.Opsets).
func stepNodes(steps []step) ([]*ir.Node, []int) {
	var nodes []*ir.Node
	var opsets []int
	for _, st := range steps {
		nodes, opsets = append(nodes, st.node), append(opsets, st.ctx.Opset)
	}
	return nodes, opsets
}

// regroupedOperand is operandView for a chain fused in a regrouped batch
// shape (r; nil for none): operand k's view, with its batch axes split to
// r's fine shape.
func (f *fuser) regroupedOperand(r *regrouping, k int, op attnOperand, through bool) (string, ops.View, []int, bool) {
	if r == nil {
		return f.operandView(op, through)
	}
	base, v, _, ok := f.operandView(op, false)
	if !ok {
		return "", ops.View{}, nil, false
	}
	want, ok := r.shape(k, v.Shape)
	if !ok {
		return "", ops.View{}, nil, false
	}
	if through && op.perm == nil {
		if b, rv, chain, ok := f.readRegrouped(op.name, want); ok {
			return b, rv, chain, true
		}
	} else if through {
		if b, bv, chain, ok := f.operandView(op, true); ok && len(chain) > 0 {
			if rv, ok := bv.Reshape(want); ok {
				return b, rv, chain, true
			}
		}
	}
	v, ok = v.Reshape(want)
	return base, v, nil, ok
}

// readRegrouped reads tensor name reshaped to shape through the movement
// steps before it (readView; chain lists them). A Reshape producing name
// is read as one reshape of its input to shape: BLOOM's
// q.transpose(1, 2).reshape(B·H, S, D) merges two axes no view merges,
// which the regrouping splits again. ok is false when no movement step
// is read through.
func (f *fuser) readRegrouped(name string, shape []int) (string, ops.View, []int, bool) {
	if i, ok := f.producer[name]; ok && !f.removed[i] && f.types[name].Const == nil {
		n := f.pl.steps[i].node
		if n.OpType == "Reshape" && isDefaultDomain(n) && len(n.Inputs) > 0 && n.Inputs[0] != "" && f.types[n.Inputs[0]].Type.DType == f.types[name].Type.DType {
			if base, v, chain, ok := f.throughOrSelf(n.Inputs[0], f.readView); ok {
				if rv, ok := v.Reshape(shape); ok {
					return base, rv, append([]int{i}, chain...), true
				}
			}
		}
	}
	base, v, chain, ok := f.readView(name)
	if !ok || len(chain) == 0 {
		return "", ops.View{}, nil, false
	}
	v, ok = v.Reshape(shape)
	return base, v, chain, ok
}

// regroupedWriteView is writeView for a chain fused in a regrouped batch
// shape (r; nil for none): the view of the fused node's result in the
// tensor it writes. A Reshape reading O is written through as one reshape
// of its output to the result's shape: BLOOM's
// bmm(probs, v).view(B, H, S, D).permute(0, 2, 1, 3) merges B and H only
// for the view to split them again, and its Transpose is then a view too.
func (f *fuser) regroupedWriteView(r *regrouping, out string) (final string, v ops.View, chain []int, ok bool) {
	if r == nil {
		return f.writeView(out)
	}
	shape, ok := f.concreteShape(out)
	want, ok2 := r.resultShape(shape)
	if !ok || !ok2 {
		return "", ops.View{}, nil, false
	}
	if i, ok := f.consumer(out); ok {
		if n := f.pl.steps[i].node; reshapeLike(n) && len(n.Outputs) == 1 && n.Outputs[0] != "" && len(n.Inputs) > 0 && n.Inputs[0] == out {
			if final, v, chain, ok := f.throughOrSelf(n.Outputs[0], f.writeView); ok {
				if rv, ok := v.Reshape(want); ok {
					return final, rv, append([]int{i}, chain...), true
				}
			}
		}
	}
	if final, v, chain, ok = f.writeView(out); ok {
		v, ok = v.Reshape(want)
	}
	return final, v, chain, ok
}

// throughOrSelf returns what trace (readView or writeView) finds for
// tensor name when it passes a movement step, else name itself as a
// contiguous view.
func (f *fuser) throughOrSelf(name string, trace func(string) (string, ops.View, []int, bool)) (string, ops.View, []int, bool) {
	if base, v, chain, ok := trace(name); ok && len(chain) > 0 {
		return base, v, chain, true
	}
	s, ok := f.concreteShape(name)
	return name, ops.Contiguous(s), nil, ok
}

// fineShape returns tensor name's concrete shape and that shape seen in
// the fine batch shape (regroupShape), name broadcasting to the batch dims
// of tensor at (a mask to the scores it applies to, the weights to
// themselves).
func (f *fuser) fineShape(name, at string, fine []int) (shape, want []int, ok bool) {
	frame, ok1 := f.batchOf(at)
	shape, ok2 := f.concreteShape(name)
	if !ok1 || !ok2 {
		return nil, nil, false
	}
	want, ok = regroupShape(shape, frame, fine)
	return shape, want, ok
}

// batchOf returns the dims of tensor name before its last two.
func (f *fuser) batchOf(name string) ([]int, bool) {
	s, ok := f.concreteShape(name)
	if !ok || len(s) < 2 {
		return nil, false
	}
	return s[:len(s)-2], true
}

// finestBatch returns the finest batch shape that each of frames (batch
// shapes of as many matrices, no dim 0) regroups: the one whose
// cumulative products are all of theirs. ok is false when there is none
// (a cumulative product of one frame does not divide a larger one of
// another: [2, 3] and [3, 2]).
func finestBatch(frames [][]int) ([]int, bool) {
	var cuts []int
	total := -1
	for _, fr := range frames {
		p := 1
		for _, d := range fr {
			if d <= 0 {
				return nil, false
			}
			p *= d
			cuts = append(cuts, p)
		}
		if total >= 0 && p != total {
			return nil, false
		}
		total = p
	}
	slices.Sort(cuts)
	var fine []int
	prev := 1
	for _, c := range slices.Compact(cuts) {
		if c == 1 {
			continue
		}
		if c%prev != 0 {
			return nil, false
		}
		fine, prev = append(fine, c/prev), c
	}
	return fine, true
}

// regroupShape returns shape, whose dims before its last two broadcast
// (right-aligned) to the batch shape frame, with those dims in the batch
// shape fine, which refines frame: a dim equal to frame's becomes the
// dims of fine it spans, a 1 as many 1s. A shape of rank < 2 has no batch
// dims and comes back as it is.
func regroupShape(shape, frame, fine []int) ([]int, bool) {
	if len(shape) < 2 {
		return shape, true
	}
	nb := len(shape) - 2
	if nb > len(frame) {
		return nil, false
	}
	off := len(frame) - nb
	var out []int
	k, fp, cum := 0, 1, 1 // fine dims spanned so far, their product, frame's
	for j, d := range frame {
		lo := k
		cum *= d
		for fp < cum && k < len(fine) {
			fp *= fine[k]
			k++
		}
		if fp != cum {
			return nil, false
		}
		if j < off {
			continue
		}
		switch md := shape[j-off]; {
		case md == d:
			out = append(out, fine[lo:k]...)
		case md == 1:
			for range k - lo {
				out = append(out, 1)
			}
		default:
			return nil, false
		}
	}
	if k != len(fine) {
		return nil, false
	}
	return append(out, shape[nb:]...), true
}

// trimLeadingOnes drops a shape's leading 1s (which broadcasting adds as
// it needs).
func trimLeadingOnes(shape []int) []int {
	for len(shape) > 0 && shape[0] == 1 {
		shape = shape[1:]
	}
	return shape
}
