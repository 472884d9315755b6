package graph

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// The attention chain matcher (see fuse.go for the forms it reads).

// maxMaskStages is how many masks (Where or additive terms) a chain may
// apply: FusedAttention's mask and its bias. The walk reads up to
// maxWalkStages: a bias, then two Wheres that are one causal mask with a
// per-key one (twoWheresCausal: MPT).
const (
	maxMaskStages = 2
	maxWalkStages = 3
)

// attnOperand says how the fused node reads Q, K or V: tensor name seen
// through perm (logical axis i is axis perm[i] of name; nil: as is). With
// grouped set, name is the tensor a head repeat expanded ([..., Hkv, 1,
// S, D], the size-1 axis at rank-3 dropped when read) and group is the
// repeat.
type attnOperand struct {
	name    string
	perm    []int
	grouped bool
	group   int
}

// maskStage is one mask the chain applies to the scores.
type maskStage struct {
	name string  // the mask tensor (bool for the Where kinds, float32 for additive)
	kind string  // ops.MaskBoolTrueMasks, ops.MaskBoolFalseMasks or ops.MaskAdditive
	fill float64 // Where kinds: the value a masked score takes
	post float64 // the product of the scales applied after the stage
	// finiteFill: a bool mask read from an additive term with a finite
	// fill (finfo.min), exact only as the chain's one mask.
	finiteFill bool
	// additive, for a bool mask read from an additive term (maskOperand),
	// is that term as an additive mask, and steps the steps computing it
	// that the bool form replaces: the fused node takes it back when the
	// chain has a Where besides (it has one bool mask).
	additive *maskStage
	steps    []int
	// causal: the mask's causal part is the fused node's causal cut (with
	// causalOff); name is then the rest of the mask, "" for none
	// (fuse_causal.go).
	causal    bool
	causalOff int
	// checkedFill: the cut stands for a finite fill, causalFill (the
	// fill times the scales after it), that the kernel checks row by row
	// (FusedAttention's causal_fill; fuse_causal.go).
	checkedFill bool
	causalFill  float64
	// uniformRows: a row that sees no key through the cut and the rest
	// takes the mean of V (masked_rows_uniform), as the export's finite
	// fill gives it (fuse_causal.go).
	uniformRows bool
	// at is the scores tensor the mask applies to: its batch dims are
	// those the mask broadcasts to (they change at a regrouping Reshape,
	// fuse_regroup.go).
	at string
	// grid: the stage is an additive bias by a key grid's rows and
	// columns, name the tensor the fusion joins its terms into
	// (fuse_grid.go); it is the fused node's bias (bias_grid).
	grid *gridBias
}

// attnMatch is one matched attention chain.
type attnMatch struct {
	steps   []int // indices into plan steps of every step the fusion replaces
	q, k, v attnOperand
	kT      bool    // K is given as [..., D, Sk]
	scale   float64 // the product of every scale of the chain
	masks   []maskStage
	// weights, when set, is the softmax's output (or a no-op Cast of it)
	// that other steps read or that is a graph output: the fused node
	// writes it as output 1 (scores_mode weights).
	weights string
	// outPerm, for an einsum P·V whose output is a permutation of the
	// logical [batch..., Sq, Dv]: output axis j is logical axis outPerm[j].
	outPerm []int
	pv      *ir.Node // the final product
	pIn     int      // P's input index in pv (1 for Einsum(V, P))
	// absorbs lists the movement steps a causal mask constant was read
	// through (fuse_causal.go): no longer computed once the fusion is in.
	absorbs []int
	// zeroCond and zeroKind are a Where after the Softmax that zeroes the
	// weights its mask hides; a match that has one took it
	// (acceptZeroRows): the fused node takes masked_rows_zero
	// (fuse_zero_rows.go).
	zeroCond, zeroKind string
	// weightsZeroed: the weights output is read after the zeroing Where
	// (else before it, the softmax's output); zeroWeights is the fused
	// node's masked_rows_weights ("" for the default).
	weightsZeroed bool
	zeroWeights   string
	// regroups lists the Reshapes of the chain that regroup the batch
	// dims of the scores or of P (fuse_regroup.go); scores is the
	// product of Q and K.
	regroups []int
	scores   string
	// headScale is a constant multiplying the product of Q and K by batch
	// matrix ([H, 1, 1]: Swin V2's per-head logit scale) before any mask or
	// regrouping: the fused node reads Q times it (fuse_head_scale.go).
	// headScaleOp is the node that applies it, Mul or Div (a divisor per
	// head: a learned temperature).
	headScale, headScaleOp string
	// softcap is c of a soft cap c·tanh(s / c) of the scores (Gemma 2,
	// Grok): after every scale and before every mask (FusedAttention's
	// softcap). 0: none.
	softcap float64
	// clamp: the scores after every mask are raised to at least
	// scoresMin (OPT's torch.max(scores, finfo.min): FusedAttention's
	// scores_min).
	clamp     bool
	scoresMin float64
	// dropsSink: the weights lose their last column between the softmax
	// and the product (sinkSlice); sinks is the logit column the chain
	// joins to the scores before the softmax (sinksOperand: FusedAttention's
	// input 6), "" until the walk meets it.
	dropsSink bool
	sinks     string
	// weightsScale is a factor a batch matrix (last two dims 1) that the
	// softmax's weights are multiplied by before the product with V
	// (transformers' attention_probs * head_mask), by node
	// weightsScaleNode: the fused node reads V times it
	// (fuse_head_scale.go).
	weightsScale, weightsScaleNode string
	// weightsPerKey: weightsScale is one value a key ([..., 1, Sk]), which
	// scales V's rows.
	weightsPerKey bool
}

// match tries to read an attention chain ending in the product with V at
// step i (a MatMul or an Einsum).
func (f *fuser) match(i int) (attnMatch, bool) {
	f.miss = attnMiss{}
	m := attnMatch{scale: 1}
	pv := f.pl.steps[i].node
	m.pv = pv
	if len(pv.Inputs) != 2 || len(pv.Outputs) != 1 || pv.Outputs[0] == "" {
		return m, f.fail(0, "node %q (%s) has %d inputs and %d outputs, not two and one", pv.Label(), pv.OpType, len(pv.Inputs), len(pv.Outputs))
	}
	for _, in := range pv.Inputs {
		if !f.isFloat32(in) {
			return m, f.fail(0, "the product with V, node %q (%s), reads %q of type %v: the fused op computes in float32", pv.Label(), pv.OpType, in, f.types[in].Type.DType)
		}
	}
	var ok bool
	if pv.OpType == "Einsum" {
		if m.v, m.outPerm, m.pIn, ok = f.einsumPV(pv); !ok {
			eq, _ := pv.AttrString("equation", "")
			return m, f.fail(0, "einsum node %q (%q) is not a product of the weights with V over the keys (one contracted label, batch labels shared)", pv.Label(), eq)
		}
	} else {
		m.v = attnOperand{name: pv.Inputs[1]}
	}
	chain := []int{i}
	m.v = f.peelRepeat(m.v, &chain)
	// Back from P to the Softmax through no-op Casts. One tensor on the
	// way may have readers besides the chain: the fused node writes it.
	x := pv.Inputs[m.pIn]
	var sm *ir.Node
	for sm == nil {
		k, ok := f.producer[x]
		if !ok || f.removed[k] || !isDefaultDomain(f.pl.steps[k].node) {
			return m, f.fail(len(chain), "%s", f.notInternal(x))
		}
		if f.uses[x] > 1 && m.dropsSink {
			return m, f.fail(len(chain), "%q, the weights with the sink's column, is read outside the chain: the fused op writes the weights without it", x)
		}
		if f.uses[x] > 1 {
			if m.weights != "" {
				return m, f.fail(len(chain), "both %q and %q, between the softmax and the product with V, are read outside the chain: the fused op writes one weights output", m.weights, x)
			}
			m.weights, m.weightsZeroed = x, m.zeroCond == ""
		}
		n := f.pl.steps[k].node
		chain = append(chain, k)
		var factor string // the weights times a factor a batch matrix or a key: V takes it
		var perKey bool
		if m.weightsScale == "" && len(m.regroups) == 0 && m.weights == "" {
			factor, perKey = f.weightsFactor(n, x)
		}
		switch {
		case n.OpType == "Softmax":
			sm = n
		case f.noOp(n):
			x = n.Inputs[0]
		case n.OpType == "Where" && m.zeroCond == "":
			if m.zeroCond, m.zeroKind, x, ok = f.zeroedWeights(n); !ok {
				return m, f.fail(len(chain), "node %q (Where) between the softmax and the product with V does not zero the weights of masked keys", n.Label())
			}
		case f.regroupsBatch(n):
			m.regroups, x = append(m.regroups, k), n.Inputs[0]
		case !m.dropsSink && len(m.regroups) == 0 && f.sinkSlice(n):
			m.dropsSink, x = true, n.Inputs[0]
		case factor != "":
			m.weightsScale, m.weightsPerKey, m.weightsScaleNode = factor, perKey, n.Label()
			x = n.Inputs[0]
			if x == factor {
				x = n.Inputs[1]
			}
		case n.OpType == "Cast" && len(n.Inputs) == 1:
			return m, f.fail(len(chain), "the softmax computes in %v: node %q (Cast) turns its weights into %v before the product with V, and the fused op computes in float32", f.types[n.Inputs[0]].Type.DType, n.Label(), f.types[x].Type.DType)
		default:
			return m, f.fail(len(chain), "node %q (%s) between the softmax and the product with V: the fused op multiplies the softmax's weights by V as they are", n.Label(), n.OpType)
		}
	}
	pt := f.types[sm.Outputs[0]].Type
	axis, err := sm.AttrInt("axis", -1)
	if len(sm.Inputs) != 1 || err != nil || !pt.RankKnown || len(pt.Shape) < 2 {
		return m, f.fail(len(chain), "softmax node %q has no known rank of 2 or more", sm.Label())
	}
	if f.pl.steps[chain[len(chain)-1]].ctx.Opset < 13 && sm.Attr("axis") == nil {
		// before opset 13 the default axis is 1
		return m, f.fail(len(chain), "softmax node %q has no axis attribute at opset %d: its rows are coerced to 2-D from axis 1", sm.Label(), f.pl.steps[chain[len(chain)-1]].ctx.Opset)
	}
	if a, err := ops.NormAxis(axis, len(pt.Shape)); err != nil || a != len(pt.Shape)-1 {
		return m, f.fail(len(chain), "softmax node %q normalizes over axis %d of %d, not over the keys (the last axis)", sm.Label(), axis, len(pt.Shape))
	}
	r, ok := f.walk(sm.Inputs[0], m, 1, chain)
	if ok && r.dropsSink && r.sinks == "" {
		ok = f.fail(len(r.steps), "the weights lose their last column before the product with V, and no sink logit was joined to the scores there")
	}
	if ok && r.zeroCond != "" {
		if ok = f.acceptZeroRows(&r); !ok {
			f.fail(len(r.steps), "the Where zeroing the weights does not match the chain's mask (the same condition, hiding keys with -inf or finfo.min)")
		}
	}
	return r, ok
}

// castNote describes a Cast's element types (" turns float64 into
// float32"), "" for any other node.
func (f *fuser) castNote(n *ir.Node) string {
	if n.OpType != "Cast" || len(n.Inputs) != 1 || len(n.Outputs) != 1 {
		return ""
	}
	return fmt.Sprintf(" turns %v into %v", f.types[n.Inputs[0]].Type.DType, f.types[n.Outputs[0]].Type.DType)
}

// noOp reports whether a node passes its first input through unchanged:
// Identity, a Cast to the element type its input already has, or a
// Reshape, Expand or Slice to the concrete shape its input already has
// (transformers' _update_causal_mask slices, expands and reshapes its
// [B, 1, S, S] mask to the shape it has). A Slice must step forward: one
// that keeps the shape then takes every element in order.
func (f *fuser) noOp(n *ir.Node) bool {
	if len(n.Inputs) == 0 || len(n.Outputs) != 1 || !isDefaultDomain(n) {
		return false
	}
	switch n.OpType {
	case "Identity":
		return len(n.Inputs) == 1
	case "Cast":
		in, out := f.types[n.Inputs[0]].Type, f.types[n.Outputs[0]].Type
		return len(n.Inputs) == 1 && in.DType == out.DType && in.DType != ir.Undefined && sameType(in, out)
	case "Reshape", "Expand", "Slice":
		in, ok1 := f.concreteShape(n.Inputs[0])
		out, ok2 := f.concreteShape(n.Outputs[0])
		if !ok1 || !ok2 || !slices.Equal(in, out) || f.types[n.Inputs[0]].Type.DType != f.types[n.Outputs[0]].Type.DType {
			return false
		}
		if n.OpType == "Slice" && len(n.Inputs) > 4 && n.Inputs[4] != "" {
			steps := f.constValue(n.Inputs[4])
			if steps == nil {
				return false
			}
			vals, err := steps.AsInt64s()
			if err != nil || slices.ContainsFunc(vals, func(s int64) bool { return s <= 0 }) {
				return false
			}
		}
		return true
	}
	return false
}

// walk follows the scores chain back from tensor x (the input of the step
// last matched) to the product of Q and K. m holds what is matched so far;
// post is the product of the scales met so far, i.e. applied after x;
// chain holds the matched steps.
func (f *fuser) walk(x string, m attnMatch, post float64, chain []int) (attnMatch, bool) {
	k, n, ok := f.internal(x)
	if !ok {
		return m, f.fail(len(chain), "the scores: %s", f.notInternal(x))
	}
	chain = append(chain[:len(chain):len(chain)], k)
	if m.dropsSink && m.sinks == "" && n.OpType != "Sub" {
		// The first step on the scores' side (after the row maximum's
		// shift) joins the sink column: before it, nothing may scale,
		// mask or cap the scores, as that would change the sink too.
		if post != 1 || len(m.masks) > 0 {
			return m, f.fail(len(chain), "the scores are scaled or masked after the sink logit is joined to them (node %q)", n.Label())
		}
		scores, sinks, why := f.sinksOperand(n)
		if why != "" {
			return m, f.fail(len(chain), "%s", why)
		}
		m.sinks = sinks
		return f.walk(scores, m, post, chain)
	}
	switch n.OpType {
	case "MatMul", "Einsum":
		return f.scoresProduct(n, m, post, chain)
	case "Cast", "Identity":
		if !f.noOp(n) {
			return m, f.fail(len(chain), "node %q (%s) in the scores%s: the fused op computes them in float32", n.Label(), n.OpType, f.castNote(n))
		}
		return f.walk(n.Inputs[0], m, post, chain)
	case "Expand", "Slice":
		// To the shape the scores have: PyTorch's slice assignment
		// attn[:, :, 0:, 0:] = ... (MViTv2's relative positions) expands
		// the value to the slice, and a full ScatterND is its value.
		if !f.noOp(n) {
			return m, f.fail(len(chain), "node %q (%s) changes the scores' shape or order", n.Label(), n.OpType)
		}
		return f.walk(n.Inputs[0], m, post, chain)
	case "Reshape", "Squeeze", "Unsqueeze", "Flatten":
		if st, steps, next, ok := f.gridBiasOf(n, post); ok {
			if len(m.masks) == maxWalkStages || m.headScale != "" || m.softcap != 0 || m.hasGrid() {
				return m, f.fail(len(chain), "node %q (Reshape) ends a bias by a key grid's rows and columns where the fused op takes no further bias (after a per-head scale, a soft cap, another such bias, or three masks)", n.Label())
			}
			return f.walk(next, m.withMask(st), post, append(chain[:len(chain):len(chain)], steps...))
		}
		if _, _, ok := f.gridView(n); ok {
			return m, f.fail(len(chain), "node %q (Reshape) views the scores back from a grid of keys, and the terms added on the grid are not one by the key's grid row and one by its column, each with every query's own (a bias by a key grid)", n.Label())
		}
		if m.headScale != "" {
			return m, f.fail(len(chain), "node %q (%s) regroups the scores before a per-head scale", n.Label(), n.OpType)
		}
		if !f.regroupsBatch(n) {
			return m, f.fail(len(chain), "node %q (%s) reshapes the scores other than by regrouping their batch dims", n.Label(), n.OpType)
		}
		m.regroups = append(m.regroups[:len(m.regroups):len(m.regroups)], k)
		return f.walk(n.Inputs[0], m, post, chain)
	case "Div", "Mul":
		if x, c, steps, ok := f.softcapOf(n); ok {
			switch {
			case m.softcap != 0:
				return m, f.fail(len(chain), "node %q (Mul) is a second soft cap of the scores", n.Label())
			case post != 1:
				return m, f.fail(len(chain), "the scores are scaled after their soft cap (node %q): the fused op caps after every scale", n.Label())
			}
			m.softcap = c
			return f.walk(x, m, post, append(chain[:len(chain):len(chain)], steps...))
		}
		next, c, ok := f.scaling(n)
		if !ok {
			if next, c, ok := f.headScaling(n); ok && m.headScale == "" {
				m.headScale, m.headScaleOp = c, n.OpType
				return f.walk(next, m, post, chain)
			}
			return m, f.fail(len(chain), "node %q (%s) scales the scores by something other than one finite constant or one constant a head", n.Label(), n.OpType)
		}
		return f.walk(next, m, post*c, chain)
	case "Max":
		x, c, ok := f.scoresFloor(n)
		switch {
		case !ok:
			return m, f.fail(len(chain), "node %q (Max) takes the scores' maximum with something other than one constant", n.Label())
		case m.clamp:
			return m, f.fail(len(chain), "node %q (Max) is a second floor on the scores", n.Label())
		case len(m.masks) > 0:
			return m, f.fail(len(chain), "node %q (Max) floors the scores before a mask: the fused op floors them after every mask", n.Label())
		case !(post > 0):
			return m, f.fail(len(chain), "node %q (Max) floors the scores before a negative scale", n.Label())
		}
		m.clamp, m.scoresMin = true, c*post
		return f.walk(x, m, post, chain)
	case "Where":
		if len(m.masks) == maxWalkStages || m.headScale != "" || m.softcap != 0 || len(n.Inputs) != 3 || f.types[n.Inputs[0]].Type.DType != ir.Bool {
			return m, f.fail(len(chain), "%s", f.whyNoMask(n, m))
		}
		for _, c := range []struct {
			fill, scores int
			kind         string
		}{{1, 2, ops.MaskBoolTrueMasks}, {2, 1, ops.MaskBoolFalseMasks}} {
			if fill, ok := f.scalarConst(n.Inputs[c.fill]); ok && f.notWider(n, n.Inputs[c.scores]) {
				mm := m.withMask(maskStage{name: n.Inputs[0], kind: c.kind, fill: fill, post: post, at: n.Inputs[c.scores]})
				return f.walk(n.Inputs[c.scores], mm, post, chain)
			}
		}
		return m, f.fail(len(chain), "node %q (Where) fills masked scores with something other than one constant, or widens them", n.Label())
	case "Add", "Sub":
		if t, rk, ok := f.rowMaxShift(n); ok && m.softcap == 0 { // tanh does not ignore a shift
			// The ReduceMax reads t too: it is in the chain, so t counts
			// as read once while the walk goes on from it.
			f.uses[t]--
			r, ok := f.walk(t, m, post, append(chain[:len(chain):len(chain)], rk...))
			f.uses[t]++
			return r, ok
		}
		if len(m.masks) == maxWalkStages || m.headScale != "" || m.softcap != 0 || len(n.Inputs) != 2 || n.Inputs[0] == n.Inputs[1] || !f.isFloat32(n.Inputs[0]) || !f.isFloat32(n.Inputs[1]) {
			return m, f.fail(len(chain), "%s", f.whyNoMask(n, m))
		}
		// Either operand of Add may be the scores; try the first, then
		// the second. Sub subtracts the mask: a factor of -1 on it.
		orders := [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}}
		sign := 1.0
		if n.OpType == "Sub" {
			orders, sign = orders[:1], -1
		}
		for _, o := range orders {
			if !f.notWider(n, o[0]) {
				continue
			}
			if steps, ok := f.zeroTerm(o[1]); ok && f.fitsScores(o[1], o[0]) {
				// Adding zeros is no mask (and no [B·H, S, S] tensor to make).
				if r, ok := f.walk(o[0], m, post, append(chain[:len(chain):len(chain)], steps...)); ok {
					return r, true
				}
				continue
			}
			if st, steps, ok := f.gridSumOf(o[1], o[0], sign*post); ok && !m.hasGrid() {
				// SamVisionAttention: a term by grid row plus one by grid
				// column, viewed as the scores (fuse_grid.go).
				if r, ok := f.walk(o[0], m.withMask(st), post, append(chain[:len(chain):len(chain)], steps...)); ok {
					return r, true
				}
			}
			if bias, keys, k, ok := f.biasPlusKeyMask(o[1], o[0]); ok && len(m.masks) == 0 {
				// T5: the position bias plus the padding mask, added to the
				// scores as one [B, H, S, S] term: the fused node takes
				// them apart, the per-key mask as its mask and the bias
				// as its bias (which diagonalBiases may then give by its
				// diagonals), and the Add is not computed. Every layer of
				// a T5 stack reads the first layer's sum: the Add (k < 0)
				// then stays until no step reads it (dropDead).
				mm := m.withMask(maskStage{name: bias, kind: ops.MaskAdditive, post: sign * post, at: o[0]})
				mm = mm.withMask(maskStage{name: keys, kind: ops.MaskAdditive, post: sign * post, at: o[0]})
				next := chain[:len(chain):len(chain)]
				if k >= 0 {
					next = append(next, k)
				}
				if r, ok := f.walk(o[0], mm, post, next); ok {
					return r, true
				}
			}
			stage, steps := f.maskOperand(o[1], o[0], sign*post)
			if r, ok := f.walk(o[0], m.withMask(stage), post, append(chain[:len(chain):len(chain)], steps...)); ok {
				return r, true
			}
		}
		return m, f.fail(len(chain), "node %q (%s) adds a term that widens the scores, or whose other operand is not a product of Q and K", n.Label(), n.OpType)
	}
	return m, f.fail(len(chain), "node %q (%s) in the scores: the fused op computes scale·Q·Kᵀ plus masks and biases, and no %s", n.Label(), n.OpType, n.OpType)
}

// whyNoMask says why the walk takes no mask at node n (a Where, Add or
// Sub) with m matched so far.
func (f *fuser) whyNoMask(n *ir.Node, m attnMatch) string {
	switch {
	case len(m.masks) == maxWalkStages:
		return fmt.Sprintf("node %q (%s) is a fourth mask or bias on the scores: the fused op takes two (or a bias and two masked_fills of one fill, a causal and a per-key one)", n.Label(), n.OpType)
	case m.headScale != "":
		return fmt.Sprintf("node %q (%s) masks the scores before a per-head scale", n.Label(), n.OpType)
	case m.softcap != 0:
		return fmt.Sprintf("node %q (%s) masks the scores before their soft cap: the fused op caps them first", n.Label(), n.OpType)
	case n.OpType == "Where" && len(n.Inputs) == 3:
		return fmt.Sprintf("node %q (Where) chooses by %q of type %v, not bool", n.Label(), n.Inputs[0], f.types[n.Inputs[0]].Type.DType)
	case len(n.Inputs) == 2 && n.Inputs[0] == n.Inputs[1]:
		return fmt.Sprintf("node %q (%s) combines the scores with themselves", n.Label(), n.OpType)
	}
	for _, in := range n.Inputs {
		if !f.isFloat32(in) {
			return fmt.Sprintf("node %q (%s) reads %q of type %v: the fused op adds float32 terms", n.Label(), n.OpType, in, f.types[in].Type.DType)
		}
	}
	return fmt.Sprintf("node %q (%s) has %d inputs", n.Label(), n.OpType, len(n.Inputs))
}

// rowMaxShift reads n as Sub(t, ReduceMax(t)) over t's last axis with
// keepdims: the row maximum taken off the scores before the softmax, as
// the "stable softmax" of DALLE-pytorch and many attention code bases
// writes it (sim - sim.amax(dim=-1, keepdim=True).detach()), or with the
// maximum's axis put back by an Unsqueeze (LayoutLMv3's PB-relax:
// scores.amax(dim=-1).unsqueeze(-1)). The softmax does not see a shift of
// its row, and the fused kernel takes off its own running maximum, so the
// Sub and the ReduceMax drop out: the scores change by the rounding of the
// subtraction, an ulp of the row maximum. Nothing but the two may read t,
// nothing but the Sub the maximum. It returns t and the steps making the
// maximum.
func (f *fuser) rowMaxShift(n *ir.Node) (string, []int, bool) {
	if n.OpType != "Sub" || len(n.Inputs) != 2 || !f.isFloat32(n.Inputs[0]) {
		return "", nil, false
	}
	t := n.Inputs[0]
	tt := f.types[t].Type
	if !tt.RankKnown || len(tt.Shape) < 2 || f.uses[t] != 2 {
		return "", nil, false // (a graph output's count is far above 2; walk checks t's producer)
	}
	last := len(tt.Shape) - 1
	k, r, ok := f.internal(n.Inputs[1])
	if !ok {
		return "", nil, false
	}
	steps, keep := []int{k}, int64(1)
	if r.OpType == "Unsqueeze" {
		// The maximum without keepdims, its axis put back last.
		if axes, ok := f.axesOf(r, 1); !ok || len(axes) != 1 || (axes[0] != -1 && axes[0] != int64(last)) {
			return "", nil, false
		}
		if k, r, ok = f.internal(r.Inputs[0]); !ok {
			return "", nil, false
		}
		steps, keep = append(steps, k), 0
	}
	if r.OpType != "ReduceMax" || len(r.Inputs) == 0 || r.Inputs[0] != t {
		return "", nil, false
	}
	if kd, err := r.AttrInt("keepdims", 1); err != nil || kd != keep {
		return "", nil, false
	}
	axes, ok := f.axesOf(r, 1)
	if !ok || len(axes) != 1 {
		return "", nil, false
	}
	if a, err := ops.NormAxis(axes[0], len(tt.Shape)); err != nil || a != last {
		return "", nil, false
	}
	return t, steps, true
}

// axesOf returns the axes of a reduction or an Unsqueeze: its attribute,
// or (newer opsets) its input in, a constant (constInputInts). ok is false
// when neither gives them.
func (f *fuser) axesOf(n *ir.Node, in int) ([]int64, bool) {
	axes, ok, err := n.AttrInts("axes")
	if err != nil || ok {
		return axes, err == nil
	}
	axes, ok = constInputInts(n, in, f.constValue)
	return axes, ok && axes != nil
}

// scoresFloor reads n as Max(s, c) or Max(c, s), c a one-element float32
// constant below +inf, that does not widen s (OPT's torch.max(scores,
// finfo.min)): it returns s and c.
func (f *fuser) scoresFloor(n *ir.Node) (string, float64, bool) {
	if n.OpType != "Max" || len(n.Inputs) != 2 || !isDefaultDomain(n) {
		return "", 0, false
	}
	for _, o := range [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}} {
		if c, ok := f.scalarConst(o[1]); ok && !math.IsNaN(c) && !math.IsInf(c, 1) && f.isFloat32(o[0]) && f.notWider(n, o[0]) {
			return o[0], c, true
		}
	}
	return "", 0, false
}

// softcapOf reads n as a soft cap c·tanh(s / c) of the scores s: Mul of
// Tanh(Div(s, c)) (or Tanh(Mul(s, 1/c))) and c, either operand order, c a
// positive one-element float32 constant, 1/c within a float32 rounding of
// the divisor's inverse (Gemma 2's attn_logit_softcapping: / c, tanh, ·
// c). It returns s, c and the Tanh's and the division's steps.
func (f *fuser) softcapOf(n *ir.Node) (string, float64, []int, bool) {
	if n.OpType != "Mul" || len(n.Inputs) != 2 || !isDefaultDomain(n) {
		return "", 0, nil, false
	}
	for _, o := range [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}} {
		c, ok := f.scalarConst(o[1])
		if !ok || !(c > 0) || math.IsInf(c, 0) {
			continue
		}
		tk, tanh, ok := f.internal(o[0])
		if !ok || tanh.OpType != "Tanh" || len(tanh.Inputs) != 1 || !f.notWider(n, o[0]) {
			continue
		}
		dk, div, ok := f.internal(tanh.Inputs[0])
		if !ok {
			continue
		}
		s, inv, ok := f.scaling(div)
		if !ok || math.Abs(inv*c-1) > 0x1p-23 {
			continue
		}
		return s, c, []int{tk, dk}, true
	}
	return "", 0, nil, false
}

// hasGrid reports whether m has a bias by a key grid among its masks (the
// fused node takes one).
func (m attnMatch) hasGrid() bool {
	return slices.ContainsFunc(m.masks, func(s maskStage) bool { return s.grid != nil })
}

// withMask returns m with stage applied before the masks matched so far
// (the walk goes backwards).
func (m attnMatch) withMask(stage maskStage) attnMatch {
	m.masks = append([]maskStage{stage}, m.masks...)
	return m
}

// scaling reads a Div or Mul of a one-element float32 constant that does
// not widen its other operand: it returns that operand and the factor.
func (f *fuser) scaling(n *ir.Node) (string, float64, bool) {
	if len(n.Inputs) != 2 || (n.OpType != "Div" && n.OpType != "Mul") || !isDefaultDomain(n) {
		return "", 0, false
	}
	c, ok := f.scalarConst(n.Inputs[1])
	next := n.Inputs[0]
	if !ok && n.OpType == "Mul" {
		c, ok = f.scalarConst(n.Inputs[0])
		next = n.Inputs[1]
	}
	if !ok || !validScale(c) || !f.notWider(n, next) {
		return "", 0, false
	}
	if n.OpType == "Div" {
		c = 1 / c
	}
	return next, c, true
}

// maskOperand reads the additive term m of the scores x as a mask stage:
// a float32 mask times post, or, when post > 0, a bool mask with a -inf
// fill where m only holds 0 and -inf: m a constant of those values (a
// causal mask folded at plan time: its bool form is made once, here), or
// Where(cond, -inf, 0) or Where(cond, 0, -inf) (times positive constants)
// that nothing else reads (then cond); and a bool mask with the fill F where
// m is transformers' _expand_mask, Where(Cast(e → bool), F, e) with F -inf
// or at most -2^127 (finfo.min): e where it is 0, F elsewhere, and adding
// F gives F (s + F rounds to F for |s| < 2^103), as the fill does. A bool
// mask lets the kernel skip the key blocks it hides and keeps its
// exponentials in base 2. It returns the stage and, for a Where, the steps
// computing m that the fusion replaces.
func (f *fuser) maskOperand(m, x string, post float64) (maskStage, []int) {
	additive := maskStage{name: m, kind: ops.MaskAdditive, post: post, at: x}
	if post <= 0 {
		return additive, nil
	}
	if name, ok := f.constBoolMask(m, x); ok {
		return maskStage{name: name, kind: ops.MaskBoolTrueMasks, fill: math.Inf(-1), post: 1, additive: &additive, at: x}, nil
	}
	// m through no-op Casts and positive scalings (their product scaled)
	// from the step that computes it.
	links := f.passThrough(m, true)
	n, steps, ok := f.linkSource(links)
	if !ok || n.OpType != "Where" || len(n.Inputs) != 3 || f.types[n.Inputs[0]].Type.DType != ir.Bool {
		return additive, nil
	}
	cond, scaled := n.Inputs[0], links[len(links)-1].factor
	if !f.fitsScores(cond, x) {
		return additive, nil
	}
	switch {
	case f.constAll(n.Inputs[1], math.Inf(-1)) && f.constAll(n.Inputs[2], 0):
		return maskStage{name: cond, kind: ops.MaskBoolTrueMasks, fill: math.Inf(-1), post: 1, additive: &additive, steps: steps, at: x}, steps
	case f.constAll(n.Inputs[1], 0) && f.constAll(n.Inputs[2], math.Inf(-1)):
		return maskStage{name: cond, kind: ops.MaskBoolFalseMasks, fill: math.Inf(-1), post: 1, additive: &additive, steps: steps, at: x}, steps
	}
	if fill, ok := f.fillWhereNonzero(n); ok {
		return maskStage{name: cond, kind: ops.MaskBoolTrueMasks, fill: fill * scaled, post: post, additive: &additive, steps: steps, at: x, finiteFill: !math.IsInf(fill, -1)}, steps
	}
	return additive, nil
}

// biasPlusKeyMask reads the additive term t of the scores x as Add(bias,
// keys) or Add(keys, bias), computed by a step (k, or -1 when other steps
// read it too: a T5 stack's layers share it): keys a
// float32 mask of one value per key (broadcast along the queries), bias a
// float32 term of the scores' last two dims that is not, and that the plan
// computes on every call or is a position bias (positionBias). A constant
// of another kind, or one computed from constants alone, such as a causal
// mask, is left to the causal split and the bool forms. It returns both
// and the Add's step.
func (f *fuser) biasPlusKeyMask(t, x string) (bias, keys string, step int, ok bool) {
	k, n, ok := f.internal(t)
	if !ok {
		k = -1
		n, ok = f.producerNode(t)
	}
	if !ok || n.OpType != "Add" || len(n.Inputs) != 2 || !f.isFloat32(n.Inputs[0]) || !f.isFloat32(n.Inputs[1]) {
		return "", "", 0, false
	}
	for _, o := range [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}} {
		if !f.perKeyMask(o[1], x) || f.perKeyMask(o[0], x) || !f.fitsScores(o[0], x) {
			continue
		}
		if f.types[o[0]].Const == nil && f.evalShapeOnly(o[0]) == nil || f.positionBias(o[0]) {
			return o[0], o[1], k, true
		}
	}
	return "", "", 0, false
}

// positionBias reports whether tensor name is a plan constant whose
// matrices are constant along their diagonals, with more than two distinct
// values, every one finite and at most 2^100 in magnitude: a position bias
// folded at plan time (T5's below 4Mi elements), not a mask (0 and a fill).
func (f *fuser) positionBias(name string) bool {
	if f.types[name].Const == nil {
		return false
	}
	d, _ := f.biasDiagonals(name)
	if d == nil {
		return false
	}
	for _, v := range d.Float32s() {
		if !(math.Abs(float64(v)) <= 0x1p100) {
			return false
		}
	}
	return true
}

// fillWhereNonzero reads Where(Cast(e → bool), F, e) (the condition
// possibly through no-op Casts), F a one-element
// constant that is -inf or at most -2^127: the tensor is e where e is 0
// and F elsewhere (transformers' _expand_mask, masked_fill of 1 - mask with
// finfo.min); or Where(B, F, 0). It returns F.
func (f *fuser) fillWhereNonzero(n *ir.Node) (float64, bool) {
	fill, ok := f.scalarConst(n.Inputs[1])
	if !ok || !(math.IsInf(fill, -1) || fill <= -0x1p127) {
		return 0, false
	}
	if f.constAll(n.Inputs[2], 0) {
		return fill, true
	}
	i, ok := f.producer[f.noOpSource(n.Inputs[0])]
	if !ok || f.removed[i] {
		return 0, false
	}
	c := f.pl.steps[i].node
	to, err := c.AttrInt("to", 0)
	if c.OpType != "Cast" || !isDefaultDomain(c) || err != nil || ir.DType(to) != ir.Bool || len(c.Inputs) != 1 || c.Inputs[0] != n.Inputs[2] {
		return 0, false
	}
	return fill, true
}

// zeroTerm reports whether tensor x, an additive term of the scores, holds
// only zeros: a constant of zeros, ConstantOfShape of zero, or, as
// diffusers' baddbmm(empty, q, kᵀ, beta=0) exports, ConstantOfShape of a
// finite value times a zero scalar. It returns the steps computing x that
// nothing else reads, which the fusion replaces.
func (f *fuser) zeroTerm(x string) ([]int, bool) {
	if f.constAll(x, 0) {
		return nil, true
	}
	k, n, ok := f.internal(x)
	if !ok {
		return nil, false
	}
	if v, ok := constantOfShapeValue(n); ok {
		return []int{k}, v == 0
	}
	if n.OpType != "Mul" || len(n.Inputs) != 2 {
		return nil, false
	}
	for i, c := range n.Inputs {
		if z, ok := f.scalarConst(c); !ok || z != 0 {
			continue
		}
		j, src, ok := f.internal(n.Inputs[1-i])
		if v, isConst := constantOfShapeValue(src); ok && isConst && !math.IsInf(v, 0) && !math.IsNaN(v) {
			return []int{k, j}, true
		}
	}
	return nil, false
}

// constantOfShapeValue returns the float32 fill of a ConstantOfShape node
// (0 when it has no value attribute).
func constantOfShapeValue(n *ir.Node) (float64, bool) {
	if n == nil || n.OpType != "ConstantOfShape" {
		return 0, false
	}
	a := n.Attr("value")
	if a == nil {
		return 0, true
	}
	if a.Tensor == nil || a.Tensor.DType != ir.Float || a.Tensor.Len() != 1 {
		return 0, false
	}
	return float64(a.Tensor.Float32s()[0]), true
}

// fitsScores reports whether mask m broadcasts to the scores x without
// widening them.
func (f *fuser) fitsScores(m, x string) bool {
	ms, ok1 := f.concreteShape(m)
	xs, ok2 := f.concreteShape(x)
	b, err := ops.BroadcastShapes(ms, xs)
	return ok1 && ok2 && err == nil && slices.Equal(b, xs)
}

// constBoolMask returns, for a float32 mask m that the plan folded or
// computes from its constants alone (evalShapeOnly, fuse_eval.go), holding
// only 0 and -inf, some of each, the name of its bool form (true where m
// is -inf), a plan constant made on first use.
func (f *fuser) constBoolMask(m, x string) (string, bool) {
	return f.boolForm(m, x, "/bool_mask", false, false, func(fill float32) bool { return math.IsInf(float64(fill), -1) })
}

// keptRowsBoolMask is constBoolMask for a chain's one mask, m times post,
// whose fill may also be a finite F with F·post at most causalFillLimit
// (finfo.min: the masks transformers builds, a Mistral-style sliding
// window's among them), provided every row of m keeps a key: in such a
// row the export's hidden scores, s + F rounded to F, lie so far below a
// kept one that their exponentials are exactly 0, as -inf gives
// (fuse_causal.go argues the bound). A row that kept none would have
// uniform weights in the export, and another mask could hide a row's
// last kept key, so m must be the chain's only mask.
//
// Where the mask hides every key past a diagonal j > i + off as well (a
// sliding window: causal, and the keys before the window), that part is
// the fused node's causal cut instead (causal reports it, with off): the
// bool mask keeps only the rest, so the blocks on the diagonal run on the
// cut's fast path, and only those at the window's lower edge read the
// mask.
func (f *fuser) keptRowsBoolMask(m, x string, post float64) (name string, causal bool, off int, ok bool) {
	name, ok = f.boolForm(m, x, "/bool_mask_rows_kept", true, false, func(fill float32) bool {
		return math.IsInf(float64(fill), -1) || float64(fill)*post <= causalFillLimit
	})
	off, causal = f.cutOffs[name]
	return name, causal, off, ok
}

// boolForm makes the bool form of float32 mask m (a plan constant, or
// computed from constants alone) over the scores x, named m + suffix:
// true where m holds its one nonzero value, the fill, which fillOK must
// accept; where the fill is finite every row must keep a key. With
// floored, m may hold several nonzero values, each of which fillOK must
// accept (the scores floored after the mask make them one, so a row may
// keep no key: splitFloored). With cut, a causal part of the mask (every
// key past a diagonal hidden) is left out of it and its offset recorded in
// cutOffs (causalPart). A mask the plan did not fold adds its bool form's
// bytes to the plan's.
func (f *fuser) boolForm(m, x, suffix string, cut, floored bool, fillOK func(float32) bool) (string, bool) {
	if !f.isFloat32(m) || !f.fitsScores(m, x) {
		return "", false
	}
	name := ops.AttentionTempPrefix + m + suffix
	if v, ok := f.types[name]; ok {
		return name, v.Const != nil && fillOK(f.boolFills[name]) // another chain's scale after it may differ
	}
	c, evaluated := f.constOrEvaluated(m)
	if c == nil || c.DType != ir.Float || c.Len() == 0 {
		return "", false
	}
	vals := c.Float32s()
	fill := float32(0) // with floored, the largest nonzero value
	for _, v := range vals {
		if v != 0 && (fill == 0 || floored && v > fill) {
			fill = v
		}
	}
	if fill == 0 || !fillOK(fill) {
		return "", false
	}
	finite := !floored && !math.IsInf(float64(fill), -1)
	cols := 1
	if len(c.Shape) > 0 {
		cols = c.Shape[len(c.Shape)-1]
	}
	b := ir.NewTensor(ir.Bool, c.Shape)
	hidden, kept := b.Bools(), false
	for r := 0; r < len(vals); r += cols {
		rowKept := false
		for j, v := range vals[r : r+cols] {
			switch {
			case v == 0:
				rowKept = true
			case v == fill || floored && v < fill: // fillOK(fill) holds for every v below with a floor
				hidden[r+j] = true
			default:
				return "", false
			}
		}
		if finite && !rowKept {
			return "", false
		}
		kept = kept || rowKept
	}
	if !kept && !floored {
		return "", false
	}
	if xs, _ := f.concreteShape(x); cut && len(c.Shape) >= 2 && slices.Equal(c.Shape[len(c.Shape)-2:], xs[len(xs)-2:]) {
		if off, ok := causalPart(hidden, c.Shape[len(c.Shape)-2], cols); ok {
			if f.cutOffs == nil {
				f.cutOffs = map[string]int{}
			}
			f.cutOffs[name] = off
		}
	}
	if evaluated {
		if !f.prog.opts.Budget.Reserve(int64(len(hidden))) {
			return "", false
		}
		f.pl.folded += int64(len(hidden))
	}
	f.types[name] = ops.Value{Type: ops.Known(ir.Bool, c.Shape), Const: b}
	if f.boolFills == nil {
		f.boolFills = map[string]float32{}
	}
	f.boolFills[name] = fill
	return name, true
}

// causalPart finds, in the bool masks hidden of sq × sk matrices, a
// diagonal off past which every row hides every key (j > i + off), with
// some key hidden besides: it clears the keys past the diagonal (the
// causal cut hides them) and returns off. A row that keeps its last key
// says only that i + off reaches it.
func causalPart(hidden []bool, sq, sk int) (int, bool) {
	off, found := 0, false
	lo := math.MinInt // the least offset the rows that keep their last key allow
	for r := 0; r*sk < len(hidden); r++ {
		i, row := r%sq, hidden[r*sk:(r+1)*sk]
		last := len(row) - 1 // the row's last kept key
		for last >= 0 && row[last] {
			last--
		}
		if last == sk-1 {
			lo = max(lo, sk-1-i)
			continue
		}
		if found && last-i != off {
			return 0, false
		}
		off, found = last-i, true
	}
	if !found || off < lo {
		return 0, false
	}
	rest := false
	for r := 0; r*sk < len(hidden); r++ {
		i, row := r%sq, hidden[r*sk:(r+1)*sk]
		from := min(max(i+off+1, 0), sk)
		rest = rest || slices.Contains(row[:from], true)
	}
	if !rest {
		return 0, false // the causal pattern alone: fuse_causal.go's
	}
	for r := 0; r*sk < len(hidden); r++ {
		i, row := r%sq, hidden[r*sk:(r+1)*sk]
		clear(row[min(max(i+off+1, 0), sk):])
	}
	return off, true
}

// constAll reports whether a tensor is a float32 constant whose every
// element is v.
func (f *fuser) constAll(name string, v float64) bool {
	c := f.constValue(name)
	if c == nil || c.DType != ir.Float {
		return false
	}
	for _, x := range c.Float32s() {
		if float64(x) != v {
			return false
		}
	}
	return true
}

// scoresProduct reads the product of Q and K that the scores chain starts
// from and completes the match.
func (f *fuser) scoresProduct(n *ir.Node, m attnMatch, post float64, chain []int) (attnMatch, bool) {
	if len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return m, f.fail(len(chain), "node %q (%s) has %d inputs and %d outputs, not two and one", n.Label(), n.OpType, len(n.Inputs), len(n.Outputs))
	}
	if n.OpType == "Einsum" {
		var ok bool
		if m.q, m.k, ok = f.einsumQK(n); !ok {
			eq, _ := n.AttrString("equation", "")
			return m, f.fail(len(chain), "einsum node %q (%q) is not a product of Q and K over one contracted label, into [.., Sq, Sk]", n.Label(), eq)
		}
	} else {
		m.q, m.k, m.kT = attnOperand{name: n.Inputs[0]}, attnOperand{name: n.Inputs[1]}, true
	}
	// Scales folded into Q or K before the product.
	for _, op := range []*attnOperand{&m.q, &m.k} {
		for {
			k, sn, ok := f.internal(op.name)
			if !ok {
				break
			}
			next, c, ok := f.scaling(sn)
			if !ok {
				break
			}
			op.name, post = next, post*c
			chain = append(chain, k)
		}
	}
	// K transposed by a Transpose of its last two axes (not through an
	// einsum's permutation, which views express).
	if m.k.perm == nil {
		if ti, tn, ok := f.internal(m.k.name); ok && tn.OpType == "Transpose" && len(tn.Inputs) == 1 && swapsLastTwo(tn, f.types[m.k.name].Type) {
			m.k.name, m.kT = tn.Inputs[0], !m.kT
			chain = append(chain, ti)
		}
	}
	m.k = f.peelRepeat(m.k, &chain)
	if m.v.grouped != m.k.grouped && (m.v.group > 1 || m.k.group > 1) || m.k.grouped && m.v.grouped && m.k.group != m.v.group {
		return m, f.fail(len(chain), "K and V repeat their heads differently (%d and %d query heads a KV head)", max(m.k.group, 1), max(m.v.group, 1))
	}
	for _, op := range []attnOperand{m.q, m.k, m.v} {
		t := f.types[op.name].Type
		if !f.isFloat32(op.name) {
			return m, f.fail(len(chain), "%q, read as Q, K or V, is %v: the fused op computes in float32", op.name, t.DType)
		}
		if !t.RankKnown || len(t.Shape) < 2 {
			return m, f.fail(len(chain), "%q, read as Q, K or V, has no known rank of 2 or more", op.name)
		}
	}
	// A bool mask read from an additive term goes back to it (its steps
	// run again) where it cannot stay: with a finite fill beside another
	// mask (F + F' is -inf where both hide; the fill alone would be F),
	// or as one of two bool masks (the fused node has one; two Wheres do
	// not fuse).
	back := func(k int) {
		b := m.masks[k]
		m.masks = slices.Clone(m.masks)
		m.masks[k] = *b.additive
		chain = slices.DeleteFunc(slices.Clone(chain), func(i int) bool { return slices.Contains(b.steps, i) })
	}
	if len(m.masks) == maxWalkStages {
		// MPT: a bias (ALiBi), then masked_fills of the padded keys and
		// of the future with one fill.
		merged, absorbs, ok := f.twoWheresCausal(m.masks[1], m.masks[2], m.scores)
		if m.masks[0].kind != ops.MaskAdditive || !ok || m.clamp {
			return m, f.fail(len(chain), "the scores have three masks or biases: the fused op takes two, or a bias and two masked_fills of one fill, a causal and a per-key one")
		}
		m.masks, m.absorbs = []maskStage{m.masks[0], merged}, absorbs
	}
	if len(m.masks) == maxMaskStages {
		for k := range m.masks {
			if m.masks[k].finiteFill {
				back(k)
			}
		}
	}
	if len(m.masks) == maxMaskStages && m.masks[0].kind != ops.MaskAdditive && m.masks[1].kind != ops.MaskAdditive {
		switch k := slices.IndexFunc(m.masks, func(s maskStage) bool { return s.additive != nil }); {
		case k >= 0:
			back(k)
		default:
			merged, absorbs, ok := f.twoWheresCausal(m.masks[0], m.masks[1], m.scores)
			if !ok || m.clamp {
				return m, f.fail(len(chain), "the scores have two bool masks (Where) that are not a causal pattern and a per-key mask of one fill: the fused op takes one, and an additive one")
			}
			m.masks, m.absorbs = []maskStage{merged}, absorbs
		}
	}
	m.scores = n.Outputs[0]
	if m.clamp {
		// A floor at or above every fill is the cut with uniform rows
		// (fuse_floored.go); any other keeps the masks as values: a row
		// that sees no key takes the floor on every key.
		chain = f.splitFloored(&m, m.maskScores(), chain)
	} else {
		chain = f.splitCausal(&m, m.maskScores(), chain)
	}
	if len(m.masks) == 1 && !m.masks[0].causal && m.masks[0].kind == ops.MaskAdditive && !m.clamp {
		// The chain's one mask, a constant of 0 and finfo.min (a sliding
		// window): as a bool mask the kernel skips the blocks it hides.
		st := m.masks[0]
		at := cmp.Or(st.at, m.maskScores())
		if name, causal, off, ok := f.keptRowsBoolMask(st.name, at, st.post); ok {
			m.masks[0] = maskStage{name: name, kind: ops.MaskBoolTrueMasks, fill: math.Inf(-1), post: 1, at: at, causal: causal, causalOff: off}
		}
	}
	m.scale *= post
	m.steps = append([]int{}, chain...)
	sort.Ints(m.steps)
	m.steps = slices.Compact(m.steps)
	if !validScale(m.scale) {
		return m, f.fail(len(chain), "the scales of the chain multiply to %g", m.scale)
	}
	return m, true
}

// peelRepeat follows K or V back through a repeat over grouped heads
// (transformers' repeat_kv: Unsqueeze → Expand → Reshape, the fused node's
// kv_group) or an Expand over batch dims only (multi-query K/V broadcast
// over the heads, which the fused node broadcasts itself). chain collects
// the steps passed.
func (f *fuser) peelRepeat(op attnOperand, chain *[]int) attnOperand {
	if op.perm != nil {
		return op
	}
	for {
		if u, g, steps, ok := f.repeatedHeads(op.name); ok && !op.grouped {
			op = attnOperand{name: u, grouped: true, group: g}
			*chain = append(*chain, steps...)
			continue
		}
		k, n, ok := f.internal(op.name)
		if !ok || n.OpType != "Expand" || len(n.Inputs) != 2 || !f.batchBroadcast(n.Inputs[0], op.name) {
			return op
		}
		op.name = n.Inputs[0]
		*chain = append(*chain, k)
	}
}

// batchBroadcast reports whether tensor out is tensor in broadcast over
// dims before its last two only (right-aligned, numpy style).
func (f *fuser) batchBroadcast(in, out string) bool {
	is, ok1 := f.concreteShape(in)
	os, ok2 := f.concreteShape(out)
	if !ok1 || !ok2 || len(is) < 2 || len(is) > len(os) {
		return false
	}
	off := len(os) - len(is)
	for i, d := range is {
		if d != os[off+i] && (d != 1 || i >= len(is)-2) {
			return false
		}
	}
	return f.types[in].Type.DType == f.types[out].Type.DType
}

// repeatedHeads recognizes name = Reshape(Expand(u)) repeating heads the
// way transformers' repeat_kv does: u is [..., Hkv, 1, S, D], the Expand
// makes [..., Hkv, g, S, D] and the Reshape [..., Hkv·g, S, D] (head h of
// the result is head h/g of u: kv_group g). It returns u, g and the two
// steps.
func (f *fuser) repeatedHeads(name string) (string, int, []int, bool) {
	ri, rn, ok := f.internal(name)
	if !ok || !reshapeLike(rn) || len(rn.Inputs) == 0 {
		return "", 0, nil, false
	}
	ei, en, ok := f.internal(rn.Inputs[0])
	if !ok || en.OpType != "Expand" || len(en.Inputs) != 2 {
		return "", 0, nil, false
	}
	u := en.Inputs[0]
	rs, ok1 := f.concreteShape(name)
	es, ok2 := f.concreteShape(en.Outputs[0])
	us, ok3 := f.concreteShape(u)
	r := len(rs)
	if !ok1 || !ok2 || !ok3 || r < 3 || len(es) != r+1 || len(us) != r+1 {
		return "", 0, nil, false
	}
	a := r - 3 // the heads axis of the result; a+1 is the repeat's
	g := es[a+1]
	if us[a+1] != 1 || g < 1 || rs[a] != es[a]*g || !slices.Equal(rs[:a], es[:a]) || !slices.Equal(rs[a+1:], es[a+2:]) {
		return "", 0, nil, false
	}
	for j := range us {
		if j != a+1 && us[j] != es[j] {
			return "", 0, nil, false
		}
	}
	return u, g, []int{ri, ei}, true
}

// einsumLabels returns the labels of a two-input Einsum's dims (A, B and
// the output), when no term repeats a label.
func (f *fuser) einsumLabels(n *ir.Node) (a, b, out []int, ok bool) {
	var ranks []int
	for _, in := range n.Inputs {
		t := f.types[in].Type
		if !t.RankKnown {
			return nil, nil, nil, false
		}
		ranks = append(ranks, len(t.Shape))
	}
	in, out, err := ops.EinsumLabels(n, ranks)
	if err != nil || len(in) != 2 {
		return nil, nil, nil, false
	}
	for _, term := range [][]int{in[0], in[1], out} {
		if len(slices.Compact(slices.Sorted(slices.Values(term)))) != len(term) {
			return nil, nil, nil, false // a diagonal
		}
	}
	return in[0], in[1], out, true
}

// einsumQK reads Einsum(A, B) -> S as the scores Q·Kᵀ: one label summed
// (D), one of A's in S (Sq), one of B's in S (Sk), S ending in Sq, Sk and
// every other label in A, B and S (batch dims, in S's order). Q and K are
// A and B seen as [batch..., Sq, D] and [batch..., Sk, D], or B and A
// where B holds Sq (einsum("bhkd,bhqd->bhqk", k, q)).
func (f *fuser) einsumQK(n *ir.Node) (q, k attnOperand, ok bool) {
	a, b, out, ok := f.einsumLabels(n)
	if !ok || len(out) < 2 {
		return q, k, false
	}
	if q, k, ok = einsumQKOrder(n.Inputs[0], n.Inputs[1], a, b, out); ok {
		return q, k, true
	}
	return einsumQKOrder(n.Inputs[1], n.Inputs[0], b, a, out) // Einsum(K, Q)
}

// einsumQKOrder is einsumQK for Q's labels a (tensor qName) and K's b
// (kName).
func einsumQKOrder(qName, kName string, a, b, out []int) (q, k attnOperand, ok bool) {
	sq, sk := out[len(out)-2], out[len(out)-1]
	batch := out[:len(out)-2]
	var d []int
	for _, l := range a {
		if slices.Contains(b, l) && !slices.Contains(out, l) {
			d = append(d, l)
		}
	}
	if len(d) != 1 || !slices.Contains(a, sq) || slices.Contains(b, sq) || !slices.Contains(b, sk) || slices.Contains(a, sk) {
		return q, k, false
	}
	qp, ok1 := labelPerm(a, append(append([]int{}, batch...), sq, d[0]))
	kp, ok2 := labelPerm(b, append(append([]int{}, batch...), sk, d[0]))
	if !ok1 || !ok2 {
		return q, k, false
	}
	return attnOperand{name: qName, perm: qp}, attnOperand{name: kName, perm: kp}, true
}

// einsumPV reads Einsum(P, V) -> O, or Einsum(V, P) -> O, as the product
// with V: P's last label summed (Sk), its one before in O (Sq), its others
// in V and O (batch), one label of V in O (Dv). V is seen as [batch...,
// Sk, Dv] (batch in P's order) and O as a permutation of [batch..., Sq,
// Dv]; pIn is P's input index.
func (f *fuser) einsumPV(n *ir.Node) (v attnOperand, outPerm []int, pIn int, ok bool) {
	a, b, out, ok := f.einsumLabels(n)
	if !ok {
		return v, nil, 0, false
	}
	if v, outPerm, ok = f.einsumPVOrder(n.Inputs[1], a, b, out); ok {
		return v, outPerm, 0, true
	}
	v, outPerm, ok = f.einsumPVOrder(n.Inputs[0], b, a, out)
	return v, outPerm, 1, ok
}

// einsumPVOrder is einsumPV for P's labels p and V's vl (tensor vName).
func (f *fuser) einsumPVOrder(vName string, p, vl, out []int) (v attnOperand, outPerm []int, ok bool) {
	if len(p) < 2 || len(out) != len(p) || len(vl) != len(p) {
		return v, nil, false
	}
	sq, sk := p[len(p)-2], p[len(p)-1]
	batch := p[:len(p)-2]
	if !slices.Contains(vl, sk) || slices.Contains(out, sk) || !slices.Contains(out, sq) || slices.Contains(vl, sq) {
		return v, nil, false
	}
	var dv []int
	for _, l := range vl {
		if !slices.Contains(p, l) && slices.Contains(out, l) {
			dv = append(dv, l)
		}
	}
	if len(dv) != 1 {
		return v, nil, false
	}
	logical := append(append([]int{}, batch...), sq, dv[0])
	vp, ok1 := labelPerm(vl, append(append([]int{}, batch...), sk, dv[0]))
	op, ok2 := labelPerm(logical, out)
	if !ok1 || !ok2 {
		return v, nil, false
	}
	if isIdentity(op) {
		op = nil
	}
	return attnOperand{name: vName, perm: vp}, op, true
}

// labelPerm returns the permutation that orders the labels have as want:
// perm[i] is the position of want[i] in have (nil for the identity). ok is
// false unless want is a permutation of have.
func labelPerm(have, want []int) ([]int, bool) {
	if len(have) != len(want) {
		return nil, false
	}
	perm := make([]int, len(want))
	for i, l := range want {
		if perm[i] = slices.Index(have, l); perm[i] < 0 {
			return nil, false
		}
	}
	if isIdentity(perm) {
		return nil, true
	}
	return perm, true
}

func isIdentity(perm []int) bool {
	for i, p := range perm {
		if p != i {
			return false
		}
	}
	return true
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

// node builds the FusedAttention node replacing the chain, reading Q, K
// and V as the tensors named (views are added by the caller). ok is false
// when the masks do not fit the node's mask and bias.
func (m attnMatch) node(steps []step) (*ir.Node, bool) {
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
		Inputs: []string{m.q.name, m.k.name, m.v.name}, Outputs: []string{m.pv.Outputs[0]},
		Attrs: []*ir.Attribute{{Name: "scale", Type: ir.AttrFloat, Float: float32(m.scale)}},
	}
	if m.kT {
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "k_transposed", Type: ir.AttrInt, Int: 1})
	}
	if m.k.group > 1 {
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "kv_group", Type: ir.AttrInt, Int: int64(m.k.group)})
	}
	if m.softcap != 0 {
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "softcap", Type: ir.AttrFloat, Float: float32(m.softcap)})
	}
	if m.clamp {
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "scores_min", Type: ir.AttrFloat, Float: float32(m.scoresMin)})
	}
	var mask, bias *maskStage
	switch len(m.masks) {
	case 1:
		mask = &m.masks[0]
		if mask.grid != nil { // a bias by a key grid is the fused node's bias
			mask, bias = nil, mask
		}
	case 2:
		first, second := &m.masks[0], &m.masks[1]
		switch {
		case first.grid != nil && second.grid != nil:
			return nil, false
		case first.grid != nil:
			mask, bias = second, first
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "bias_first", Type: ir.AttrInt, Int: 1})
		case second.kind == ops.MaskAdditive:
			mask, bias = first, second
		case first.kind == ops.MaskAdditive:
			mask, bias = second, first
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "bias_first", Type: ir.AttrInt, Int: 1})
		default:
			return nil, false
		}
	}
	if mask != nil && mask.causal {
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "causal", Type: ir.AttrInt, Int: 1})
		if mask.causalOff != 0 {
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "causal_offset", Type: ir.AttrInt, Int: int64(mask.causalOff)})
		}
		if mask.checkedFill {
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "causal_fill", Type: ir.AttrFloat, Float: float32(mask.causalFill)})
		}
	}
	if mask != nil && mask.uniformRows { // with the cut, or a floored bool mask alone (fuse_floored.go)
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "masked_rows_uniform", Type: ir.AttrInt, Int: 1})
	}
	if m.zeroCond != "" {
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "masked_rows_zero", Type: ir.AttrInt, Int: 1})
		if m.zeroWeights != "" {
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "masked_rows_weights", Type: ir.AttrString, String: []byte(m.zeroWeights)})
		}
	}
	if mask != nil && mask.name != "" {
		n.Inputs = append(n.Inputs, mask.name)
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "mask_kind", Type: ir.AttrString, String: []byte(mask.kind)})
		if mask.kind == ops.MaskAdditive {
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "mask_scale", Type: ir.AttrFloat, Float: float32(mask.post)})
		} else {
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "mask_fill", Type: ir.AttrFloat, Float: float32(mask.fill * mask.post)})
		}
	}
	if bias != nil {
		for len(n.Inputs) < 5 {
			n.Inputs = append(n.Inputs, "")
		}
		n.Inputs = append(n.Inputs, bias.name)
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "bias_scale", Type: ir.AttrFloat, Float: float32(bias.post)})
		if bias.grid != nil {
			n.Attrs = append(n.Attrs, &ir.Attribute{Name: "bias_grid", Type: ir.AttrInt, Int: int64(bias.grid.kw)})
		}
	}
	if m.sinks != "" {
		for len(n.Inputs) < 6 {
			n.Inputs = append(n.Inputs, "")
		}
		n.Inputs = append(n.Inputs, m.sinks)
	}
	if m.weights != "" {
		n.Outputs = append(n.Outputs, m.weights)
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "scores_mode", Type: ir.AttrString, String: []byte(ops.ScoresWeights)})
	}
	n.Doc = "fused by attnrun from " + strings.Join(m.labels(steps), ", ")
	return n, true
}

func (m attnMatch) labels(steps []step) []string {
	var out []string
	for _, k := range m.steps {
		out = append(out, steps[k].node.Label())
	}
	return out
}
