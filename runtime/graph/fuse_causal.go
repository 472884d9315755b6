package graph

import (
	"bytes"
	"cmp"
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Causal masks as FusedAttention's causal cut.
//
// A chain's one mask that is exactly a causal pattern — key j hidden from
// query i iff j > i + off, in every batch matrix — is the fused node's
// causal = 1, causal_offset = off, with no mask tensor: the kernel then
// never computes the keys past a query block's diagonal and runs the rest
// on its fast path, instead of classifying a mask block by block. The
// pattern must be a plan constant (a causal mask folded from the lengths:
// Trilu, a comparison of Ranges), a view of one (the Slices of a
// registered causal buffer, which stay unfolded when the buffer is
// large), or computed from constants alone but too large to fold (the
// same masks past about 2048 tokens: evaluated once, fuse_eval.go); it is
// checked element by element once per plan. It is read from
//
//	Where(A, fill, S) | Where(A, S, fill)   A bool, hiding where true
//	                                        (false)
//	Add(S, A) | Add(A, S)                   A float32: 0 where kept, the
//	                                        fill where hidden
//
// A mask that combines such a pattern A with a mask B that broadcasts
// along the queries (one value per key: key padding) is split the same
// way, the fused node taking B as its mask:
//
//	Where(Or(A, B), -inf, S)       A, B hide where true (Add on bool,
//	                               PyTorch's export of bool + bool, is Or)
//	Where(And(A, B), S, -inf)      A, B keep where true
//	Add(S, Where(B, -inf, A))      A float32 0/-inf, B bool hiding where
//	Add(S, Where(B, A, -inf))      true (false): nn.MultiheadAttention's
//	                               merge of a float attn_mask with the
//	                               key padding mask (masked_fill), as
//	                               nn.TransformerDecoderLayer exports it
//	                               with generate_square_subsequent_mask
//	Add(S, Add(A, B) | Add(B, A))  A float32 0/-inf, B float32 (an
//	                               additive per-key mask; Where(B', -inf,
//	                               0) becomes the bool B')
//
// through no-op Casts and, on the additive forms, positive scalings
// (baddbmm's beta); the Or (And, Where, Add), the Casts and scalings are
// then not computed, nor are the Slices of a buffer A is read through.
//
// A -inf fill is exact: -inf plus or in place of anything finite is -inf,
// and a row with every key hidden gives NaN either way. (A +inf or NaN in
// B where A hides would make the export's row NaN; the cut ignores it. B
// is computed from the user's padding mask, and no export puts +inf in
// one.)
//
// A finite fill F (the fill times the scales after it) is taken as the
// cut only when F ≤ -2^127 (finfo(float32).min = -3.4e38: transformers'
// LLaMA, newer GPT-2). In a query row that keeps a key, the row max m of
// the export's softmax is a kept score, and with every score below |F|/4
// in magnitude (8.5e37 for finfo.min; larger scores overflow the export's
// own products and sums) a hidden s + F - m < F/2 ≤ -8.5e37: its exp is
// exactly 0 in float32, as the cut's is. A row can lose every key when
// the offset is < 0 or a B hides keys (left padding: a prompt's first
// queries see only padding). The export gives such a row uniform
// weights over all Sk keys when every one of its scores is the same F:
// s + F rounds to F for |s| < 2^103 (half an ulp of finfo.min), and F
// times a scale is still one value. That is so for
//
//	Where(Or(A, B), F, S), Where(And(A, B), S, F)   one fill for both
//	Add(S, Where(B, F, A)), Add(S, Where(B, A, F))  A of 0 and F, the
//	                               same F: transformers' _prepare_4d_
//	                               causal_attention_mask, masked_fill of
//	                               the padding on the finfo.min causal mask
//	Add(S, A), Where(A, F, S)      A alone with offset < 0
//
// and there the fused node takes masked_rows_uniform = 1 (such a row's
// output is the mean of V, ops/attention.go) and B as a -inf key mask (in
// a row that keeps a key, -inf and F hide alike), provided F is finite in
// float32 (finfo.min times a scale > 1 overflows to -inf in the export,
// whose rows then are NaN: those stay the mask). Mixed fills stay the
// mask: Where(B, -inf, A) with a finfo.min A hides a padded key with
// -inf and a key past the diagonal with finfo.min, so a padded row's
// weights are uniform over the unpadded keys past its diagonal; Where(B,
// F, A) with a -inf A, the other way round. Add(A, B) of two finfo.min
// terms (transformers 4.30-4.35's LLaMA: expanded_attn_mask +
// causal_mask) is -inf where both hide, so rows that lose every key are
// not uniform: it is the cut checked row by row, as below.
//
// An additive causal constant A added to the scores by an Add of its own,
// then an additive mask M by another (CLIP's text encoder) is cut as
// Add(A, M) is (causalAddedFirst).
//
// A bool mask that is the causal pattern alone with a fill above -2^127
// (GPT-2's -1e4, seed 003's -1e9), and one followed by an additive mask
// stage (GPT-2's torch.where then + the padding mask), is cut too, with
// a check (causalChecked): such a fill gives hidden keys weight once
// a row's kept scores all lie less than 104 above it, and most of it when
// they lie below (kept scores of -2e4 put every weight on the hidden
// keys; TestCausalCutFills). The fused node takes causal_fill = F and the
// kernel checks every row against it, computing again, with the hidden
// scores at F, the query blocks where the cut would not be exact.

// causalFillLimit is the largest finite fill (times the scales after it)
// the causal cut stands for (see above): -2^127, so finfo(float32).min.
const causalFillLimit = -0x1p127

// causalSplit is a chain's mask read as a causal cut plus the rest.
type causalSplit struct {
	off int // key j is hidden from query i iff j > i + off
	// rest is the mask left besides the cut, broadcast along the
	// queries; rest.name is "" for none. A bool rest's kind is the
	// chain's.
	rest maskStage
	// uniform: rows can lose every key, and the export gives them
	// uniform weights (one finite fill on every score): the fused node
	// takes masked_rows_uniform.
	uniform bool
	// checked: the cut stands for the finite fill (the pattern's fill
	// times the scales after it), checked row by row by the kernel
	// (causal_fill), the rest added after it.
	checked bool
	fill    float64
	// steps compute the mask from A and B (the Or, And, Where or Add and
	// the Casts and scalings around it): the fusion replaces them.
	// absorbs are the movement steps A is read through (Slices of a
	// buffer): dead once the mask is no longer computed.
	steps, absorbs []int
}

// splitCausal puts the causal part of the match's one mask stage on the
// causal cut, when it has one, and returns the chain with the steps the
// split replaces; scores is the tensor of the chain's scores the first
// mask applies to (the product of Q and K, or a regrouping of it).
func (f *fuser) splitCausal(m *attnMatch, scores string, chain []int) []int {
	if len(m.masks) == 0 || len(m.masks) > 2 || slices.ContainsFunc(m.masks, func(s maskStage) bool { return s.causal }) {
		return chain // none, or split already (twoWheresCausal)
	}
	if len(m.masks) == 2 && m.masks[0].kind == ops.MaskAdditive && m.masks[1].kind != ops.MaskAdditive {
		// A bias added before a Where (BLOOM: baddbmm's ALiBi term, then
		// masked_fill of the future and padded keys with finfo.min): the
		// Where splits as a chain's one mask would, the bias stays,
		// added first. Every score the Where hides is its fill whatever
		// the bias, as with no bias.
		inner := attnMatch{masks: m.masks[1:]}
		at := m.masks[1].at
		if at == "" {
			at = scores
		}
		out := f.splitCausal(&inner, at, chain)
		switch rest := inner.masks[0]; {
		case !rest.causal:
			return chain
		case rest.name != "":
			m.masks = []maskStage{m.masks[0], rest}
		case rest.checkedFill:
			// A finite fill takes the place of the bias (bias_first),
			// which the fused node has only beside a mask.
			return chain
		default:
			// The cut alone: the bias is the fused node's mask, added
			// before the cut as a bias first would be.
			b := m.masks[0]
			b.causal, b.causalOff, b.uniformRows = true, rest.causalOff, rest.uniformRows
			m.masks = []maskStage{b}
		}
		m.absorbs = inner.absorbs
		return out
	}
	st := m.masks[0]
	var cs causalSplit
	var ok bool
	switch fill := st.fill * st.post; {
	case len(m.masks) == 2 || st.kind != ops.MaskAdditive && fill > causalFillLimit:
		// GPT-2's -1e4 (then its padding), seed 003's -1e9: cut,
		// checked row by row.
		cs, ok = f.causalChecked(m.masks, scores)
	case st.kind == ops.MaskAdditive:
		cs, ok = f.causalAdditive(st.name, scores, st.post)
	case fill <= causalFillLimit:
		cs, ok = f.causalMask(st.name, st.kind == ops.MaskBoolTrueMasks, scores)
		cs.rest.kind, cs.rest.fill, cs.rest.post = st.kind, st.fill, st.post
		if ok && !math.IsInf(fill, -1) && (cs.off < 0 || cs.rest.name != "") {
			// Rows can lose every key: each of their scores is the fill.
			// The rest hides with -inf, exactly as the fill does in rows
			// that keep a key.
			ok = finite32(fill)
			cs.uniform, cs.rest.fill, cs.rest.post = true, math.Inf(-1), 1
		}
	}
	if !ok {
		return chain
	}
	st = cs.rest
	if st.at == "" {
		st.at = scores
	}
	st.causal, st.causalOff, st.uniformRows = true, cs.off, cs.uniform
	st.checkedFill, st.causalFill = cs.checked, cs.fill
	m.masks = []maskStage{st}
	m.absorbs = cs.absorbs
	return append(chain[:len(chain):len(chain)], cs.steps...)
}

// causalAddedPattern reads tensor a, added to the scores x times factor,
// as the causal pattern A of a split cs. keyFill is the fill of the
// per-key Where merged with it (-inf, or F), NaN for an added per-key
// mask, 0 for none: a finite fill is cut alone, or with a Where of the
// same fill, then with masked_rows_uniform where rows can lose every key;
// beside an added mask only at or below -2^127 (s + F is F there), the cut
// checked per row; else the fill times the scales after it must be -inf.
func (f *fuser) causalAddedPattern(a, x string, factor, keyFill float64, cs causalSplit) (causalSplit, bool) {
	off, fill, absorbs, ok := f.causalAddPattern(a, x)
	scaled := fill * factor
	switch {
	case !ok:
		return causalSplit{}, false
	case math.IsInf(scaled, -1):
		ok = keyFill == 0 || math.IsNaN(keyFill) || math.IsInf(keyFill, -1)
	case scaled <= causalFillLimit && (keyFill == 0 || keyFill == fill):
		cs.uniform = off < 0 || keyFill != 0
		ok = !cs.uniform || finite32(scaled)
	case scaled <= causalFillLimit && math.IsNaN(keyFill) && finite32(scaled):
		// An added per-key mask (transformers 4.30-4.35's LLaMA:
		// expanded_attn_mask + causal_mask, both 0/finfo.min): the
		// cut, checked per row. s + F is F for |s| < 2^103, so a
		// row recomputed with the hidden scores at F, the mask added
		// after, is the export's (F + F overflows to -inf there too).
		cs.checked, cs.fill = true, scaled
	default:
		ok = false
	}
	if !ok {
		return causalSplit{}, false
	}
	cs.off, cs.absorbs = off, absorbs
	return cs, true
}

// causalAddedFirst splits an additive causal constant A (0 where kept,
// one fill F where hidden) added to the scores before an additive mask M,
// each through its own Add (CLIP's text encoder: the finfo.min causal mask
// of _build_causal_attention_mask, then _expand_mask's padding, each added
// to its own view of the scores): (s + A) + M is s + (A + M) here, as s +
// F rounds to F (|s| < 2^103) and F + M is what A + M holds where A hides,
// so it is the cut of transformers 4.30-4.35's Add(A, B) above, by the
// same rule (causalAddedPattern): checked row by row for a finite F·post
// at or below -2^127, exact for -inf, M the mask; a fill above -2^127
// (s + F is not F) stays the mask. A alone is causalAdditive's.
func (f *fuser) causalAddedFirst(first, rest maskStage, scores string) (causalSplit, bool) {
	if rest.name == "" {
		return causalSplit{}, false
	}
	return f.causalAddedPattern(first.name, scores, first.post, math.NaN(), causalSplit{rest: rest})
}

// causalMask reads bool mask cond (hiding a score where it equals hide)
// of the scores x as a causal pattern, or as Or(pattern, per-key mask)
// (And for keep masks) through no-op Casts. The rest's name is the
// per-key mask; its kind is left to the caller.
func (f *fuser) causalMask(cond string, hide bool, x string) (causalSplit, bool) {
	links := f.passThrough(cond, false)
	for _, l := range links {
		if off, absorbs, ok := f.causalPattern(l.name, hide, x); ok {
			return causalSplit{off: off, steps: l.steps, absorbs: absorbs}, true
		}
	}
	combine := "And"
	if hide {
		combine = "Or"
	}
	n, steps, ok := f.linkSource(links)
	if !ok || (n.OpType != combine && (n.OpType != "Add" || !hide)) || len(n.Inputs) != 2 ||
		f.types[n.Inputs[0]].Type.DType != ir.Bool || f.types[n.Inputs[1]].Type.DType != ir.Bool {
		return causalSplit{}, false
	}
	for _, o := range [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}} {
		if !f.perKeyMask(o[1], x) {
			continue
		}
		if off, absorbs, ok := f.causalPattern(o[0], hide, x); ok {
			return causalSplit{off: off, rest: maskStage{name: o[1]}, steps: steps, absorbs: absorbs}, true
		}
	}
	return causalSplit{}, false
}

// causalAdditive reads the additive mask add of the scores x, scaled by
// post, as a causal pattern of 0 and a fill (-inf, or ≤ causalFillLimit),
// or as the merge of a 0/-inf pattern with a per-key mask: Where(B, -inf,
// A), Where(B, A, -inf) or Add of A and B, or of a 0/F pattern with
// Where(B, F, A) or Where(B, A, F) (F ≤ causalFillLimit: transformers'
// masked_fill of the padding on its finfo.min causal mask), through no-op
// Casts and positive scalings.
func (f *fuser) causalAdditive(add, x string, post float64) (causalSplit, bool) {
	links := f.passThrough(add, true)
	for _, l := range links {
		if cs, ok := f.causalAddedPattern(l.name, x, post*l.factor, 0, causalSplit{steps: l.steps}); ok {
			return cs, true
		}
	}
	n, steps, ok := f.linkSource(links)
	if !ok {
		return causalSplit{}, false
	}
	post *= links[len(links)-1].factor
	switch {
	case n.OpType == "Where" && len(n.Inputs) == 3 && f.types[n.Inputs[0]].Type.DType == ir.Bool && f.perKeyMask(n.Inputs[0], x):
		for _, c := range []struct {
			fill, a int
			kind    string
		}{{1, 2, ops.MaskBoolTrueMasks}, {2, 1, ops.MaskBoolFalseMasks}} {
			keyFill, ok := f.sameConst(n.Inputs[c.fill])
			if !ok || !(keyFill < 0) || !f.fitsScores(n.Inputs[c.fill], x) {
				continue
			}
			rest := maskStage{name: n.Inputs[0], kind: c.kind, fill: math.Inf(-1), post: 1}
			if cs, ok := f.causalAddedPattern(n.Inputs[c.a], x, post, keyFill, causalSplit{rest: rest, steps: steps}); ok {
				return cs, true
			}
		}
	case n.OpType == "Add" && len(n.Inputs) == 2 && f.isFloat32(n.Inputs[0]) && f.isFloat32(n.Inputs[1]):
		for _, o := range [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}} {
			if !f.perKeyMask(o[1], x) {
				continue
			}
			rest, more := f.maskOperand(o[1], x, post)
			if rest.finiteFill { // exact only as the one mask: the causal part adds its own fill
				rest, more = *rest.additive, nil
			}
			if cs, ok := f.causalAddedPattern(o[0], x, post, math.NaN(), causalSplit{rest: rest, steps: append(steps[:len(steps):len(steps)], more...)}); ok {
				return cs, true
			}
		}
	}
	return causalSplit{}, false
}

// maskLink is a tensor a mask passes through unchanged but for a scale:
// the steps computing the mask from it, and the product of their scales.
type maskLink struct {
	name   string
	steps  []int
	factor float64
}

// passThrough follows mask tensor x back through no-op Casts and, with
// scaled, positive one-element scalings, that nothing else reads: the
// tensors on the way, x first.
func (f *fuser) passThrough(x string, scaled bool) []maskLink {
	links := []maskLink{{name: x, factor: 1}}
	for len(links) < maxViewChain {
		last := links[len(links)-1]
		k, n, ok := f.internal(last.name)
		if !ok {
			break
		}
		next, c := "", 1.0
		if f.noOp(n) {
			next = n.Inputs[0]
		} else if nx, cc, ok := f.scaling(n); scaled && ok && cc > 0 {
			next, c = nx, cc
		}
		if next == "" {
			break
		}
		links = append(links, maskLink{name: next, steps: append(last.steps[:len(last.steps):len(last.steps)], k), factor: last.factor * c})
	}
	return links
}

// linkSource returns the step computing the last of links (one output,
// nothing else reading it), and the steps from it to the mask.
func (f *fuser) linkSource(links []maskLink) (*ir.Node, []int, bool) {
	last := links[len(links)-1]
	k, n, ok := f.internal(last.name)
	if !ok || len(n.Outputs) != 1 {
		return nil, nil, false
	}
	return n, append(last.steps[:len(last.steps):len(last.steps)], k), true
}

// causalAddPattern reports whether float32 tensor name, a plan constant
// or a view of one, is a causal pattern over the scores x with 0 where
// kept and one negative value, the fill, where hidden.
func (f *fuser) causalAddPattern(name, x string) (off int, fill float64, absorbs []int, ok bool) {
	v, data, absorbs, ok := f.constView(name, x, ir.Float)
	if !ok {
		return 0, 0, nil, false
	}
	// Any causal pattern hides the last key from the first query.
	r := len(v.Shape)
	vals := data.Float32s()
	fv := vals[v.Offset+(v.Shape[r-1]-1)*v.Strides[r-1]]
	if !(fv < 0) {
		return 0, 0, nil, false
	}
	// Classes of the elements the view spans: 0 kept, 1 the fill, 2
	// anything else (never matches).
	lo, hi := v.Offset, v.Offset
	for d, n := range v.Shape {
		if st := (n - 1) * v.Strides[d]; st < 0 {
			lo += st
		} else {
			hi += st
		}
	}
	cls := make([]byte, hi+1-lo)
	for i, e := range vals[lo : hi+1] {
		switch e {
		case 0:
		case fv:
			cls[i] = 1
		default:
			cls[i] = 2
		}
	}
	v.Offset -= lo
	off, ok = causalOffset(cls, v, 1)
	return off, float64(fv), absorbs, ok
}

// sameConst returns the value every element of float32 constant name
// has.
func (f *fuser) sameConst(name string) (float64, bool) {
	c := f.constValue(name)
	if c == nil || c.DType != ir.Float || c.Len() == 0 {
		return 0, false
	}
	v := float64(c.Float32s()[0])
	return v, f.constAll(name, v)
}

// finite32 reports whether v is finite in float32.
func finite32(v float64) bool { return math.Abs(v) <= math.MaxFloat32 }

// twoWheresCausal reads two Where masks of a chain, a applied before b —
// a causal pattern and a per-key mask, each by its own masked_fill of one
// fill F (DALLE-pytorch, x-transformers, MPT: dots.masked_fill(~mask, F),
// then dots.masked_fill(causal, F)) — as Where(Or(A, B), F, S), which
// they are when both fills, times the scales after them, are the same F:
// a score either hides is F, whichever hid it last. It returns the one
// mask stage that replaces them, the cut with the per-key mask as the
// rest, as causalMask makes it for the Or: exact for F = -inf; for a
// finite F ≤ causalFillLimit the rest hides with -inf and rows that lose
// every key take masked_rows_uniform (every score of theirs is F). A
// causal constant of one query (a decode step) hides nothing: the stage
// is then the per-key mask alone. absorbs are the movement steps the
// causal constant is read through.
func (f *fuser) twoWheresCausal(a, b maskStage, scores string) (st maskStage, absorbs []int, ok bool) {
	fill := a.fill * a.post
	if a.kind == ops.MaskAdditive || b.kind == ops.MaskAdditive || fill != b.fill*b.post ||
		!(math.IsInf(fill, -1) || fill <= causalFillLimit && finite32(fill)) {
		return st, nil, false
	}
	for _, o := range [][2]maskStage{{a, b}, {b, a}} {
		cut, keys := o[0], o[1]
		hide := cut.kind == ops.MaskBoolTrueMasks
		if !f.perKeyMask(keys.name, cmp.Or(keys.at, scores)) {
			continue
		}
		if f.hidesNothing(cut.name, hide, cmp.Or(cut.at, scores)) {
			return keys, nil, true
		}
		off, absorbs, ok := f.causalPattern(cut.name, hide, cmp.Or(cut.at, scores))
		if !ok {
			continue
		}
		keys.causal, keys.causalOff = true, off
		if !math.IsInf(fill, -1) {
			keys.fill, keys.post, keys.uniformRows = math.Inf(-1), 1, true
		}
		return keys, absorbs, true
	}
	return st, nil, false
}

// hidesNothing reports whether bool tensor name, a plan constant (or a
// view of one, see constView) over the scores x, has no element equal to
// hide.
func (f *fuser) hidesNothing(name string, hide bool, x string) bool {
	v, data, _, ok := f.constView(name, x, ir.Bool)
	if !ok {
		return false
	}
	b, h := ir.BytesOf(data.Data), boolByte(hide)
	var walk func(dim, off int) bool
	walk = func(dim, off int) bool {
		if dim == len(v.Shape) {
			return b[off] != h
		}
		for i := range v.Shape[dim] {
			if !walk(dim+1, off+i*v.Strides[dim]) {
				return false
			}
		}
		return true
	}
	return walk(0, v.Offset)
}

// perKeyMask reports whether mask m broadcasts to the scores x along the
// queries (its dim -2, if any, is 1) without widening them.
func (f *fuser) perKeyMask(m string, x string) bool {
	ms, ok := f.concreteShape(m)
	return ok && (len(ms) < 2 || ms[len(ms)-2] == 1) && f.fitsScores(m, x)
}

// causalPattern reports whether bool tensor name, a plan constant or a
// view of one through movement steps (absorbs), is exactly a causal
// pattern over the scores x: its last two dims are x's [Sq, Sk] and in
// every matrix key j is hidden (equals hide) from query i iff j > i + off.
func (f *fuser) causalPattern(name string, hide bool, x string) (off int, absorbs []int, ok bool) {
	v, data, absorbs, ok := f.constView(name, x, ir.Bool)
	if !ok {
		return 0, nil, false
	}
	off, ok = causalOffset(ir.BytesOf(data.Data), v, boolByte(hide))
	return off, absorbs, ok
}

// constView returns tensor name, of element type dt, as a view of a plan
// constant's data: the constant itself, a constant read through movement
// steps (absorbs), or a tensor the plan computes from constants alone,
// evaluated once here (evalShapeOnly). Its last two dims must be those of the scores
// x, and it must broadcast to them.
func (f *fuser) constView(name, x string, dt ir.DType) (v ops.View, data *ir.Tensor, absorbs []int, ok bool) {
	if !f.fitsScores(name, x) {
		return v, nil, nil, false
	}
	base, evaluated := name, false
	if c := f.types[name].Const; c != nil {
		data, v = c, ops.Contiguous(c.Shape)
	} else if b, bv, chain, ok := f.readView(name); ok && len(chain) > 0 && f.types[b].Const != nil {
		base, data, v, absorbs = b, f.types[b].Const, bv, chain
	} else if c := f.evalShapeOnly(name); c != nil {
		// Computed from the shapes alone, too large to fold
		// (fuse_eval.go): its steps die once the cut replaces it.
		data, v, evaluated = c, ops.Contiguous(c.Shape), true
	}
	xs, _ := f.concreteShape(x)
	r := len(v.Shape)
	if data == nil || data.DType != dt || r < 2 || v.Shape[r-2] != xs[len(xs)-2] || v.Shape[r-1] != xs[len(xs)-1] || slices.Contains(v.Shape, 0) {
		return v, nil, nil, false
	}
	if !evaluated {
		if data = f.constValue(base); data == nil { // its elements are read
			return v, nil, nil, false
		}
	}
	return v, data, absorbs, true
}

// causalOffset returns off when, in every matrix of the view v of data,
// element (i, j) equals hide iff j > i + off, and equals 1 - hide
// elsewhere. The offset comes from the first row that hides some but not
// all keys; a view with no such row is no causal pattern.
func causalOffset(data []byte, v ops.View, hide byte) (int, bool) {
	r := len(v.Shape)
	sq, sk := v.Shape[r-2], v.Shape[r-1]
	rs, cs := v.Strides[r-2], v.Strides[r-1]
	batch := v.Shape[:r-2]
	if sq == 0 || sk == 0 || slices.Contains(batch, 0) {
		return 0, false
	}
	off, found := 0, false
	for i := 0; i < sq && !found; i++ {
		vis := 0
		for vis < sk && data[v.Offset+i*rs+vis*cs] != hide {
			vis++
		}
		if vis > 0 && vis < sk {
			off, found = vis-1-i, true
		}
	}
	if !found {
		return 0, false
	}
	// Row i is tmpl[sk-vis : 2·sk-vis] with vis = i + off + 1 keys
	// visible (clamped to [0, sk]): compared as bytes where the row is
	// contiguous.
	tmpl := make([]byte, 2*sk)
	for k := range tmpl {
		tmpl[k] = 1 - hide
		if k >= sk {
			tmpl[k] = hide
		}
	}
	idx := make([]int, len(batch))
	for {
		base := v.Offset
		for d, k := range idx {
			base += k * v.Strides[d]
		}
		for i := 0; i < sq; i++ {
			row, vis := base+i*rs, min(max(i+off+1, 0), sk)
			want := tmpl[sk-vis : 2*sk-vis]
			if cs == 1 {
				if !bytes.Equal(data[row:row+sk], want) {
					return 0, false
				}
				continue
			}
			for j := 0; j < sk; j++ {
				if data[row+j*cs] != want[j] {
					return 0, false
				}
			}
		}
		d := len(idx) - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < batch[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return off, true
		}
	}
}

// boolByte is a bool's byte (0 or 1).
func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// causalChecked reads a bool mask stage with a finite negative fill F
// (times the scales after it), or with -inf followed by an additive mask
// stage, as the causal cut when the mask is exactly a causal pattern (no
// per-key part): the chain's masks are
//
//	[Where(A, F, S) | Where(A, S, F)]                    F > -2^127
//	[Where(A, F, S) | Where(A, S, F), Add(·, M)]         any F < 0
//
// (GPT-2's torch.where with its causal buffer and -1e4 masked_bias, then +
// the padding mask). The fused node takes causal = 1 and, for a finite F,
// causal_fill = F; M becomes its mask (the split's rest). With -inf the cut
// is exact (-inf plus a finite M is -inf). With a finite F the kernel cuts
// all the same and checks each query row: where the row's largest kept
// score lies at least 104 above F plus the largest term of M the export's
// exp of a hidden score is exactly 0 in float32, so the cut gives the
// export's result; an item with a row that fails (kept scores as low as
// the fill, a row whose kept keys are all padding) is computed again with
// the hidden scores at F (ops/attention.go, causal_fill).
func (f *fuser) causalChecked(masks []maskStage, scores string) (causalSplit, bool) {
	first := masks[0]
	var rest maskStage // the node's mask after the split: none, or M
	if len(masks) == 2 {
		if rest = masks[1]; rest.kind != ops.MaskAdditive {
			return causalSplit{}, false
		}
	}
	if first.kind == ops.MaskAdditive {
		return f.causalAddedFirst(first, rest, scores)
	}
	fill := first.fill * first.post
	if !(fill < 0) {
		return causalSplit{}, false
	}
	cs, ok := f.causalMask(first.name, first.kind == ops.MaskBoolTrueMasks, scores)
	if !ok || cs.rest.name != "" {
		return causalSplit{}, false
	}
	cs.rest = rest
	if !math.IsInf(fill, -1) {
		cs.checked, cs.fill = true, fill
	}
	return cs, true
}
