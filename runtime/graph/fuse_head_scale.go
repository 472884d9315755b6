package graph

import (
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Per-head scales.
//
// Swin Transformer V2's cosine attention multiplies the product of the
// normalized Q and K by a learned scale per head:
//
//	attn = F.normalize(q) @ F.normalize(k).transpose(-2, -1)
//	attn = attn * logit_scale.clamp(max=log(100)).exp()    # [H, 1, 1]
//
// then adds its position bias and the window mask. The scale is a folded
// constant at plan time, but one per batch matrix, and FusedAttention has
// one scalar scale. Since the constant is 1 along the last two dims, it
// scales each Q·Kᵀ matrix as a whole, which is scaling that matrix's Q:
// (s·Q)·Kᵀ = s·(Q·Kᵀ). The fusion so runs a Mul of Q by the constant before
// the fused node (one pass over Q, not the scores) and reads its result as
// Q. The walk (fuse_chain.go) takes such a Mul only next to the product:
// with no mask or regrouping Reshape between them (a mask before it would
// be scaled per head too), and one per chain. The rounding changes by an
// ulp or so (s·q summed, for s times the sum), as scalar scales folded
// into the fused node's scale do.
//
// A learned temperature per head divides the scores instead,
// (q @ k.transpose(-2, -1)) / self.temperature with temperature [H, 1, 1]:
// the same holds for Div(x, c), (Q/c)·Kᵀ = (Q·Kᵀ)/c, and the fusion then
// adds a Div of Q by c. Div(c, x) divides a constant by the scores and is
// no scale.

// headScaleOpset is the opset of the Mul or Div a per-head scale adds.
const headScaleOpset = 14

// headScaling reads n = Mul(x, c), Mul(c, x) or Div(x, c), c a float32
// constant of more than one element that is 1 along its last two dims (a
// scale or divisor per batch matrix) and does not widen x: it returns x and
// c's name.
func (f *fuser) headScaling(n *ir.Node) (x, c string, ok bool) {
	if (n.OpType != "Mul" && n.OpType != "Div") || len(n.Inputs) != 2 || !isDefaultDomain(n) {
		return "", "", false
	}
	for k := range 2 {
		if n.OpType == "Div" && k == 0 {
			continue // Div(c, x): c over the scores
		}
		c, x = n.Inputs[k], n.Inputs[1-k]
		v := f.types[c]
		shape, known := v.Type.Shape.Concrete()
		if v.Const == nil || v.Type.DType != ir.Float || !known || len(shape) < 3 || ir.NumElements(shape) < 2 {
			continue
		}
		if shape[len(shape)-1] == 1 && shape[len(shape)-2] == 1 && f.notWider(n, x) {
			return x, c, true
		}
	}
	return "", "", false
}

// headScaledQ returns m reading Q times its per-head scale (or over its
// per-head divisor), with the Mul or Div computing it added to added (none
// when m has no per-head scale); ok is false when the product does not
// keep Q's shape, or Q is read through a permutation or a head repeat.
func (f *fuser) headScaledQ(m attnMatch, added *addedNodes) (attnMatch, bool) {
	if m.headScale == "" {
		return m, true
	}
	doc := "Q times the per-head scale " + m.headScale + " (multiplying the scores by it)"
	if m.headScaleOp == "Div" {
		doc = "Q over the per-head divisor " + m.headScale + " (dividing the scores by it)"
	}
	q, ok := f.scaledOperand(m.q, m.headScaleOp, m.headScale, "/head_scaled", doc, added)
	m.q = q
	return m, ok
}

// weightsScaledV returns m reading V times the factor its weights are
// multiplied by after the softmax, with the Mul computing it added to
// added (none when m has no such factor); ok is false as headScaledQ's is,
// for V. A factor a batch matrix c scales V as it is (transformers'
// attention_probs * head_mask: (P·c)·V = P·(c·V)); a factor a key c_j
// ([..., 1, Sk]: a mask applied after the softmax) scales V's row j
// ((P·diag(c))·V = P·(diag(c)·V)), so V is multiplied by c seen as
// [..., Sk, 1], a Reshape of it (its dim before the keys is 1).
func (f *fuser) weightsScaledV(m attnMatch, added *addedNodes) (attnMatch, bool) {
	if m.weightsScale == "" {
		return m, true
	}
	c := m.weightsScale
	doc := "V times " + c + " (the factor on the softmax's weights)"
	if m.weightsPerKey {
		reshape, err := ops.Lookup(ops.DomainONNX, "Reshape", regroupReshapeOpset)
		dims, ok := f.concreteShape(c)
		if err != nil || !ok || len(dims) == 0 {
			return m, false
		}
		rows := append(slices.Clone(dims[:max(0, len(dims)-2)]), dims[len(dims)-1], 1)
		name := ops.AttentionTempPrefix + c + "/per_key_rows"
		added.add(false, f.reshapeNode(c, name, rows, "the factor a key on the weights as one a row of V"), reshape, regroupReshapeOpset)
		c, doc = name, "V's rows times "+m.weightsScale+" (the factor a key on the softmax's weights)"
	}
	v, ok := f.scaledOperand(m.v, "Mul", c, "/weights_scaled", doc, added)
	m.v = v
	return m, ok
}

// scaledOperand returns op read through a node of type opType (Mul or
// Div) by c, named op's name + suffix and added to added; ok is false when
// the node does not keep op's shape, or op is read through a permutation
// or a head repeat.
func (f *fuser) scaledOperand(op attnOperand, opType, c, suffix, doc string, added *addedNodes) (attnOperand, bool) {
	schema, err := ops.Lookup(ops.DomainONNX, opType, headScaleOpset)
	if err != nil || op.perm != nil || op.grouped {
		return op, false
	}
	x := op.name
	name := ops.AttentionTempPrefix + x + suffix
	n := &ir.Node{Name: name, OpType: opType, Inputs: []string{x, c}, Outputs: []string{name}, Doc: doc}
	res, err := schema.Infer(n, headScaleOpset, []ops.Value{f.types[x], f.types[c]})
	if err != nil || len(res) != 1 {
		return op, false
	}
	want, ok1 := f.concreteShape(x)
	got, ok2 := res[0].Type.Shape.Concrete()
	if !ok1 || !ok2 || !slices.Equal(got, want) {
		return op, false
	}
	f.types[name] = ops.Value{Type: res[0].Type}
	added.add(false, n, schema, headScaleOpset)
	return attnOperand{name: name}, true
}

// weightsFactor reads n = Mul(p, c) or Mul(c, p), p the weights (whose
// output is out) and c a float32 factor of them (factorOf) that does not
// widen p: it returns c's name and whether it is one a key, "" otherwise.
func (f *fuser) weightsFactor(n *ir.Node, out string) (string, bool) {
	if n.OpType != "Mul" || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] != out || !isDefaultDomain(n) || n.Inputs[0] == n.Inputs[1] {
		return "", false
	}
	type candidate struct {
		c    string
		kind factorKind
	}
	var found []candidate
	for k := range 2 {
		c, p := n.Inputs[k], n.Inputs[1-k]
		if _, produced := f.producer[p]; produced && f.isFloat32(c) && f.isFloat32(p) && f.notWider(n, p) {
			if kind := factorOf(f.types[c].Type, f.types[p].Type); kind != noFactor {
				found = append(found, candidate{c, kind})
			}
		}
	}
	if len(found) == 2 { // 1×1 matrices (one query, one key): the weights are the Softmax's
		found = slices.DeleteFunc(found, func(x candidate) bool { return f.fromSoftmax(x.c) })
	}
	if len(found) != 1 {
		return "", false
	}
	return found[0].c, found[0].kind == factorPerKey
}

// fromSoftmax reports whether tensor x is a Softmax's output, or one read
// through Casts, Identities, Slices or Reshapes (a few steps).
func (f *fuser) fromSoftmax(x string) bool {
	for range 6 {
		k, ok := f.producer[x]
		if !ok {
			return false
		}
		n := f.pl.steps[k].node
		switch n.OpType {
		case "Softmax":
			return true
		case "Cast", "Identity", "Slice", "Reshape":
			x = n.Inputs[0]
		default:
			return false
		}
	}
	return false
}

// factorKind is how a factor of the softmax's weights varies (factorOf).
type factorKind int

const (
	noFactor        factorKind = iota
	factorPerMatrix            // one value a batch matrix, or one in all
	factorPerKey               // one value a key: [..., 1, Sk] or [Sk]
)

// factorOf says how tensor c, of type t, can multiply weights p (of type
// pt, [..., Sq, Sk]) so that V can take it: as one value a batch matrix
// (rank ≥ 2 with its last two dims 1, or one element), as one a key
// (its last dim Sk, the same size or symbol, and with rank ≥ 2 the one
// before it 1), or not.
func factorOf(t, pt ir.TypeInfo) factorKind {
	dims, known := t.Shape.Concrete()
	switch {
	case matrixOnes(t) || t.RankKnown && known && ir.NumElements(dims) == 1:
		return factorPerMatrix
	case !t.RankKnown || len(t.Shape) == 0 || !pt.RankKnown || len(pt.Shape) < 2:
		return noFactor
	}
	r := len(t.Shape)
	last, sk := t.Shape[r-1], pt.Shape[len(pt.Shape)-1]
	if last != sk || !last.Known() && last.Param == "" || r >= 2 && !(t.Shape[r-2].Known() && t.Shape[r-2].Value == 1) {
		return noFactor
	}
	return factorPerKey
}
